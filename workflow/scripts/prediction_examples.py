from jtc.pipeline.jobs import job
from jtc.stages.prediction import prediction_examples

p = snakemake.params
with job(snakemake):
    prediction_examples(
        snakemake.input.model,
        snakemake.input.validation,
        snakemake.input.sentences,
        {m: snakemake.input.get(m) for m in p.methods},
        snakemake.output.table,
        snakemake.output.markdown,
        snakemake.output.html,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        settings=p.settings,
        threads=snakemake.threads,
    )
