from jtc.pipeline.jobs import job
from jtc.stages.benchmarks import run_benchmarks

p = snakemake.params
with job(snakemake):
    run_benchmarks(
        snakemake.input.model,
        snakemake.input.maps,
        snakemake.input.selection,
        snakemake.input.tasks,
        snakemake.output[0],
        settings=p.settings,
        measured=p.measured,
        batch_size=p.batch_size,
        seed=p.seed,
        threads=snakemake.threads,
    )
