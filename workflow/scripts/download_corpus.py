from jtc.logs import job_log
from jtc.stages.corpora import download_corpus

with job_log(snakemake.log[0]):
    download_corpus(
        snakemake.params.url,
        snakemake.params.sha256,
        snakemake.output[0],
        max_bytes=snakemake.params.max_bytes,
    )
