from jtc.logs import job_log
from jtc.stages.report import headline_table

with job_log(snakemake.log[0]):
    headline_table(
        snakemake.params.pairs,
        snakemake.params.template,
        snakemake.output.table,
        snakemake.output.landing,
    )
