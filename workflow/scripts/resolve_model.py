from jtc.pipeline.jobs import job
from jtc.stages.models import resolve_model

with job(snakemake):
    resolve_model(snakemake.wildcards.model, dict(snakemake.params.spec), snakemake.output[0])
