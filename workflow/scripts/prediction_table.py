from jtc.stages.prediction import prediction_table
from jtc.workflow.jobs import job

p = snakemake.params
with job(snakemake):
    prediction_table(
        dict(zip(p.methods, snakemake.input, strict=True)),
        snakemake.output.table,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        settings=p.settings,
        seed=p.seed,
    )
