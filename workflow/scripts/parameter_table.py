from jtc.pipeline.jobs import job
from jtc.stages.metrics import parameter_table

with job(snakemake):
    parameter_table(
        snakemake.input.model,
        {k: v for k, v in snakemake.input.items() if k != "model"},
        snakemake.output.table,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
