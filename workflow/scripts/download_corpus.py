from jtc.pipeline.jobs import job
from jtc.stages.corpora import download_corpus

with job(snakemake):
    # not params: how long to wait changes no result, so changing it reruns nothing (a changed
    # param would download the corpus again)
    entry = snakemake.config["corpora"][snakemake.wildcards.corpus]
    download_corpus(
        snakemake.wildcards.corpus,
        snakemake.params.url,
        snakemake.params.sha256,
        snakemake.output[0],
        max_bytes=snakemake.params.max_bytes,
        timeout=entry.get("timeout"),
        max_seconds=entry.get("max_seconds"),
    )
