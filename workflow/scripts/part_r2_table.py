from jtc.pipeline.jobs import job
from jtc.stages.submodules import part_r2_table

with job(snakemake):
    part_r2_table(
        snakemake.input.validation,
        snakemake.input.maps,
        snakemake.output.table,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
