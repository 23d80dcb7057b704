from jtc.logs import job_log
from jtc.stages.models import resolve_model

with job_log(snakemake.log[0]):
    resolve_model(snakemake.wildcards.model, dict(snakemake.params.spec), snakemake.output[0])
