from jtc.logs import job_log
from jtc.stages.submodules import part_r2_table

with job_log(snakemake.log[0]):
    part_r2_table(
        snakemake.input.validation,
        snakemake.input.maps,
        snakemake.output.table,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
