from jtc.pipeline.jobs import job
from jtc.stages.submodules import record_parts

p = snakemake.params
with job(snakemake):
    record_parts(
        snakemake.input.model,
        snakemake.input.sentences,
        snakemake.output[0],
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        split=snakemake.wildcards.split,
        n=p.n,
        positions=p.positions,
        seed=p.seed,
        batch_size=p.batch_size,
        max_tokens=p.max_tokens,
        dtype=p.dtype,
        threads=snakemake.threads,
        device_map=p.device_map,
    )
