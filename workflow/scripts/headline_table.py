from jtc.pipeline.jobs import job
from jtc.stages.report import headline_table

with job(snakemake):
    headline_table(
        snakemake.params.pairs,
        snakemake.params.template,
        snakemake.output.table,
        snakemake.output.landing,
    )
