from jtc.pipeline.jobs import job
from jtc.stages.benchmarks import benchmark_tasks

with job(snakemake):
    benchmark_tasks(snakemake.output[0], settings=snakemake.params.settings)
