from jtc.pipeline.jobs import job
from jtc.stages.corpora import download_corpus

with job(snakemake):
    download_corpus(
        snakemake.wildcards.corpus,
        snakemake.params.url,
        snakemake.params.sha256,
        snakemake.output[0],
        max_bytes=snakemake.params.max_bytes,
        # not a param: how long to wait changes no result, so changing it reruns nothing
        timeout=snakemake.config["corpora"][snakemake.wildcards.corpus].get("timeout"),
    )
