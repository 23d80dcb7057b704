from jtc.pipeline.jobs import job
from jtc.stages.benchmarks import plot_benchmarks

o = snakemake.output
with job(snakemake):
    plot_benchmarks(
        snakemake.input.accuracy,
        snakemake.input.retained,
        o.png,
        o.pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
