from jtc.logs import job_log
from jtc.stages.metrics import parameter_table

with job_log(snakemake.log[0]):
    parameter_table(
        snakemake.input.model,
        {k: v for k, v in snakemake.input.items() if k != "model"},
        snakemake.output.table,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
