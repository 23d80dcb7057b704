from jtc.logs import job_log
from jtc.stages.submodules import prefix_states

p = snakemake.params
with job_log(snakemake.log[0]):
    prefix_states(
        snakemake.input.model,
        snakemake.input.sentences,
        snakemake.input.validation,
        snakemake.output[0],
        jump=int(snakemake.wildcards.jump),
        count=p.sentences,
        batch_size=p.batch_size,
        threads=snakemake.threads,
        device_map=p.device_map,
    )
