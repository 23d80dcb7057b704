from jtc.stages.prediction import plot_prediction
from jtc.workflow.jobs import job

with job(snakemake):
    plot_prediction(
        snakemake.input[0],
        snakemake.output.png,
        snakemake.output.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
