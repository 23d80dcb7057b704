from jtc.pipeline.jobs import job
from jtc.stages.metrics import plot_r2

with job(snakemake):
    plot_r2(
        snakemake.input[0],
        snakemake.output.png,
        snakemake.output.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
