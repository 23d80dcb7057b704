from jtc.pipeline.jobs import job
from jtc.stages.pruning import run_pruned

p = snakemake.params
with job(snakemake):
    run_pruned(
        snakemake.input.model,
        snakemake.input.sentences,
        snakemake.input.maps,
        snakemake.input.selection,
        snakemake.output.runs,
        snakemake.output.selected,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        settings=p.settings,
        batch_size=p.batch_size,
        max_tokens=p.max_tokens,
        threads=snakemake.threads,
        device_map=p.device_map,
    )
