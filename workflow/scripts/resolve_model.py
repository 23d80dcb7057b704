from jtc.stages.models import resolve_model
from jtc.workflow.jobs import job

with job(snakemake):
    resolve_model(snakemake.wildcards.model, dict(snakemake.params.spec), snakemake.output[0])
