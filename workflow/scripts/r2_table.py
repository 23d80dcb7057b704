from jtc.logs import job_log
from jtc.stages.metrics import r2_table

with job_log(snakemake.log[0]):
    r2_table(
        snakemake.input.validation,
        {m: snakemake.input.get(m) for m in snakemake.params.methods},
        snakemake.output.table,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        threads=snakemake.threads,
    )
