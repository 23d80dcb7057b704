from jtc.pipeline.jobs import job
from jtc.stages.metrics import r2_table

with job(snakemake):
    r2_table(
        snakemake.input.validation,
        {m: snakemake.input.get(m) for m in snakemake.params.methods},
        snakemake.output.table,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        threads=snakemake.threads,
    )
