from jtc.logs import job_log
from jtc.stages.submodules import replace_parts

p = snakemake.params
with job_log(snakemake.log[0]):
    replace_parts(
        snakemake.input.model,
        snakemake.input.validation,
        snakemake.input.prefix,
        list(snakemake.input.maps),
        snakemake.output[0],
        model=snakemake.wildcards.model,
        variant=snakemake.wildcards.variant,
        parts=list(p.parts),
        jump=int(snakemake.wildcards.jump),
        top_k=p.top_k,
        batch_size=p.batch_size,
        threads=snakemake.threads,
        device_map=p.device_map,
    )
