include: "inputs/corpora.smk"


from jtc.data.sources import reading_spec


rule download_corpus:
    output:
        paths.DOWNLOAD,
    log:
        "logs/download_corpus/{corpus}{suffix}.log",
    wildcard_constraints:
        # the file's suffix names its source (paths.DOWNLOAD_SUFFIXES)
        suffix="|".join(s.replace(".", r"\.") for s in paths.DOWNLOAD_SUFFIXES.values()),
    conda:
        "../envs/jtc.yaml"
    params:
        url=lambda w: config["corpora"][w.corpus]["url"],
        sha256=lambda w: config["corpora"][w.corpus].get("sha256"),
        max_bytes=lambda w: config["corpora"][w.corpus].get("max_bytes"),
    script:
        "../scripts/download_corpus.py"


# a checkpoint: the rules that draw sentences from its splits check, once it is made and
# before they run, that the splits have what the config asks of them (checked_sentences)
checkpoint prepare_corpus:
    input:
        unpack(corpus_inputs),
    output:
        paths.CORPUS,
    log:
        "logs/prepare_corpus/{corpus}.log",
    benchmark:
        "benchmarks/prepare_corpus/{corpus}.tsv"
    conda:
        "../envs/jtc.yaml"
    params:
        # the entry less what only the download reads (its timeout): no rerun when that changes
        spec=lambda w: reading_spec(config["corpora"][w.corpus]),
        seed=config["seed"],
        validation_fraction=config["validation_fraction"],
        code=code_hash("prepare_corpus"),
        content=corpus_content,
    script:
        "../scripts/prepare_corpus.py"
