from jtc.pipeline.jobs import job
from jtc.stages.corpora import prepare_corpus

with job(snakemake):
    prepare_corpus(
        snakemake.wildcards.corpus,
        dict(snakemake.params.spec),
        snakemake.input.get("archive"),
        snakemake.output[0],
        seed=snakemake.params.seed,
        validation_fraction=snakemake.params.validation_fraction,
    )
