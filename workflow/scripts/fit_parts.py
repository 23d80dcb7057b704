from jtc.pipeline.jobs import job
from jtc.stages.submodules import fit_parts

with job(snakemake):
    fit_parts(
        snakemake.input[0],
        snakemake.output[0],
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        threads=snakemake.threads,
    )
