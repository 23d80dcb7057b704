from jtc.stages.pruning import export_pruned
from jtc.workflow.jobs import job

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
