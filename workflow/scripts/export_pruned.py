from jtc.pipeline.jobs import job
from jtc.stages.pruning import export_pruned

p = snakemake.params
with job(snakemake):
    export_pruned(
        snakemake.input.model,
        snakemake.input.maps,
        snakemake.input.selection,
        snakemake.output[0],
        model=snakemake.wildcards.model,
        settings=p.settings,
        threads=snakemake.threads,
    )
