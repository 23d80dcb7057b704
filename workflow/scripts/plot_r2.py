from jtc.stages.metrics import plot_r2
from jtc.workflow.jobs import job

with job(snakemake):
    plot_r2(
        snakemake.input[0],
        snakemake.output.png,
        snakemake.output.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
