from jtc.pipeline.jobs import job
from jtc.stages.submodules import plot_part_r2

with job(snakemake):
    plot_part_r2(
        snakemake.input[0],
        snakemake.output.png,
        snakemake.output.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
