from jtc.logs import job_log
from jtc.stages.submodules import fit_parts

with job_log(snakemake.log[0]):
    fit_parts(
        snakemake.input[0],
        snakemake.output[0],
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        threads=snakemake.threads,
    )
