from jtc.pipeline.jobs import job
from jtc.stages.pruning import calibrate_pruning

p = snakemake.params
with job(snakemake):
    calibrate_pruning(
        snakemake.input.model,
        snakemake.input.sentences,
        snakemake.output.maps,
        snakemake.output.calibration,
        snakemake.output.selection,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        settings=p.settings,
        held_out=p.held_out,
        batch_size=p.batch_size,
        max_tokens=p.max_tokens,
        threads=snakemake.threads,
        device_map=p.device_map,
    )
