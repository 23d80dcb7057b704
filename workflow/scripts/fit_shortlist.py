from jtc.logs import job_log
from jtc.stages.prediction import fit_shortlist

with job_log(snakemake.log[0]):
    fit_shortlist(
        snakemake.input.model,
        snakemake.input.train,
        snakemake.output[0],
        model=snakemake.wildcards.model,
        rank=snakemake.params.rank,
        threads=snakemake.threads,
    )
