from jtc.logs import job_log
from jtc.stages.prediction import plot_prediction

with job_log(snakemake.log[0]):
    plot_prediction(
        snakemake.input[0],
        snakemake.output.png,
        snakemake.output.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
