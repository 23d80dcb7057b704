from jtc.logs import job_log
from jtc.stages.fit import fit_map

with job_log(snakemake.log[0]):
    fit_map(
        snakemake.input[0],
        snakemake.output[0],
        method=snakemake.wildcards.method,
        settings=dict(snakemake.params.settings),
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        threads=snakemake.threads,
    )
