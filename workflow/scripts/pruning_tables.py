from jtc.pipeline.jobs import job
from jtc.stages.pruning import pruning_tables

p = snakemake.params
with job(snakemake):
    pruning_tables(
        snakemake.input.runs,
        snakemake.input.selected_runs,
        snakemake.input.calibration,
        snakemake.input.selection,
        snakemake.output.spans,
        snakemake.output.selected,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        settings=p.settings,
        seed=p.seed,
    )
