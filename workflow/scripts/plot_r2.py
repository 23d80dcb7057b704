from jtc.logs import job_log
from jtc.stages.metrics import plot_r2

with job_log(snakemake.log[0]):
    plot_r2(
        snakemake.input[0],
        snakemake.output.png,
        snakemake.output.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
