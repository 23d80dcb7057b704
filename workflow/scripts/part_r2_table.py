from jtc.logs import job_log
from jtc.part_stages import part_r2

with job_log(snakemake.log[0]):
    part_r2(
        snakemake.input.validation,
        snakemake.input.maps,
        snakemake.output.table,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
