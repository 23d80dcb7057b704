from jtc.logs import job_log
from jtc.stages.early_exit import plot_early_exit

with job_log(snakemake.log[0]):
    plot_early_exit(
        snakemake.input.sweep,
        snakemake.input.savings,
        snakemake.output.png,
        snakemake.output.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
