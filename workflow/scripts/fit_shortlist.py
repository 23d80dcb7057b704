from jtc.pipeline.jobs import job
from jtc.stages.prediction import fit_shortlist

with job(snakemake):
    fit_shortlist(
        snakemake.input.model,
        snakemake.input.train,
        snakemake.output[0],
        model=snakemake.wildcards.model,
        rank=snakemake.params.rank,
        threads=snakemake.threads,
    )
