# The input and params functions of the rules in corpora.smk, which includes this file at its
# top. Those that several families share are in shared.smk.
from jtc.pipeline.fingerprint import corpus_fingerprint


def corpus_content(wildcards):
    """The content fingerprint of a corpus's text file or downloaded archive (None for
    the packaged corpora): a file replaced with an older time stamp reruns the job."""
    return corpus_fingerprint(wildcards.corpus, config["corpora"][wildcards.corpus])


def corpus_inputs(wildcards):
    spec = config["corpora"][wildcards.corpus]
    if spec["source"] in paths.DOWNLOAD_SUFFIXES:  # a file downloaded by URL
        return {"archive": paths.download(wildcards.corpus, spec["source"])}
    if spec["source"] == "text_file":
        return {"text": spec["path"]}
    return {}
