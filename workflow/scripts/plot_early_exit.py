from jtc.pipeline.jobs import job
from jtc.stages.early_exit import plot_early_exit

with job(snakemake):
    plot_early_exit(
        snakemake.input.sweep,
        snakemake.input.savings,
        snakemake.output.png,
        snakemake.output.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
