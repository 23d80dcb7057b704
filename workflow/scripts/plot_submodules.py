from jtc.pipeline.jobs import job
from jtc.stages.submodules import plot_submodules

with job(snakemake):
    plot_submodules(
        snakemake.input[0],
        snakemake.output.png,
        snakemake.output.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
