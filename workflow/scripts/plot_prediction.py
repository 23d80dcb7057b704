from jtc.pipeline.jobs import job
from jtc.stages.prediction import plot_prediction

with job(snakemake):
    plot_prediction(
        snakemake.input[0],
        snakemake.output.png,
        snakemake.output.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
