from jtc.stages.report import headline_table
from jtc.workflow.jobs import job

with job(snakemake):
    headline_table(
        snakemake.params.pairs,
        snakemake.params.template,
        snakemake.output.table,
        snakemake.output.landing,
    )
