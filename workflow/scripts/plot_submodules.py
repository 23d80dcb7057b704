from jtc.logs import job_log
from jtc.stages.submodules import plot_submodules

with job_log(snakemake.log[0]):
    plot_submodules(
        snakemake.input[0],
        snakemake.output.png,
        snakemake.output.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
