from jtc.pipeline.jobs import job
from jtc.stages.measures import generation_fidelity

p = snakemake.params
with job(snakemake):
    generation_fidelity(
        snakemake.input.model,
        snakemake.input.sentences,
        snakemake.input.maps,
        snakemake.input.selection,
        snakemake.output[0],
        corpus=snakemake.wildcards.corpus,
        settings=p.settings,
        measured=p.measured,
        batch_size=p.batch_size,
        max_tokens=p.max_tokens,
        threads=snakemake.threads,
        device_map=p.device_map,
    )
