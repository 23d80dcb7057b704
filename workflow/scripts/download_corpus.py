from jtc.runs.jobs import job
from jtc.stages.corpora import download_corpus

with job(snakemake):
    download_corpus(
        snakemake.params.url,
        snakemake.params.sha256,
        snakemake.output[0],
        max_bytes=snakemake.params.max_bytes,
    )
