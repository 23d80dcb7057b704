from jtc.pipeline.jobs import job
from jtc.stages.benchmarks import benchmark_pairs

p = snakemake.params
with job(snakemake):
    benchmark_pairs(
        snakemake.input[0],
        snakemake.output.pairs,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        settings=p.settings,
        seed=p.seed,
    )
