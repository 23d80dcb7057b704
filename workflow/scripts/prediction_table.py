from jtc.pipeline.jobs import job
from jtc.stages.prediction import prediction_table

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
