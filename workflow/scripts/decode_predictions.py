from jtc.logs import job_log
from jtc.stages.prediction import decode_predictions

with job_log(snakemake.log[0]):
    decode_predictions(
        snakemake.input.model,
        snakemake.input.validation,
        list(snakemake.input.maps),
        snakemake.output[0],
        model=snakemake.wildcards.model,
        method=snakemake.wildcards.method,
        top_k=snakemake.params.top_k,
        threads=snakemake.threads,
    )
