from jtc.logs import job_log
from jtc.pipeline import r2_metrics

with job_log(snakemake.log[0]):
    r2_metrics(
        snakemake.input.validation,
        {m: list(snakemake.input.get(m, [])) for m in snakemake.params.methods},
        snakemake.output.table,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        threads=snakemake.threads,
    )
