from jtc.pipeline.jobs import job
from jtc.stages.submodules import replace_parts

p = snakemake.params
with job(snakemake):
    replace_parts(
        snakemake.input.model,
        snakemake.input.sentences,
        snakemake.input.validation,
        snakemake.input.maps,
        snakemake.output[0],
        model=snakemake.wildcards.model,
        variants={v: list(parts) for v, parts in p.variants.items()},
        jumps=list(p.jumps),
        count=p.sentences,
        top_k=p.top_k,
        batch_size=p.batch_size,
        threads=snakemake.threads,
        device_map=p.device_map,
    )
