from jtc.pipeline.jobs import job
from jtc.stages.benchmarks import benchmark_table

p = snakemake.params
with job(snakemake):
    benchmark_table(
        snakemake.input[0],
        snakemake.output.accuracy,
        snakemake.output.retained,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        settings=p.settings,
        seed=p.seed,
    )
