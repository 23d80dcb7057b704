from jtc.logs import job_log
from jtc.stages.fit import fit_mat

with job_log(snakemake.log[0]):
    fit_mat(
        snakemake.input[0],
        snakemake.output[0],
        source=int(snakemake.wildcards.source),
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        threads=snakemake.threads,
    )
