from jtc.pipeline.jobs import job
from jtc.stages.measures import measure_tables

p = snakemake.params
with job(snakemake):
    measure_tables(
        snakemake.input.windows,
        snakemake.input.prompts,
        snakemake.output.context,
        snakemake.output.generation,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        settings=p.settings,
        seed=p.seed,
    )
