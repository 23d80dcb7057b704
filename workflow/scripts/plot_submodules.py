from jtc.stages.submodules import plot_submodules
from jtc.workflow.jobs import job

with job(snakemake):
    plot_submodules(
        snakemake.input[0],
        snakemake.output.png,
        snakemake.output.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
