from jtc.pipeline.jobs import job
from jtc.stages.measures import context_perplexity

p = snakemake.params
with job(snakemake):
    context_perplexity(
        snakemake.input.model,
        snakemake.input.sentences,
        snakemake.input.maps,
        snakemake.input.selection,
        snakemake.output[0],
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        settings=p.settings,
        measured=p.measured,
        held_out=p.held_out,
        batch_size=p.batch_size,
        threads=snakemake.threads,
        device_map=p.device_map,
    )
