rule extract_hidden:
    input:
        model=paths.MODEL,
        sentences=paths.CORPUS,
    output:
        directory(paths.HIDDEN),
    log:
        "logs/extract_hidden/{model}/{corpus}/{split}.log",
    benchmark:
        "benchmarks/extract_hidden/{model}/{corpus}/{split}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("extract_hidden"),
        runtime=runtime("extract_hidden"),
        gpu_memory_percent=gpu_share("extract_hidden"),
    params:
        n=lambda w: config["sizes"][w.split],
        positions=positions,
        seed=config["seed"],
        batch_size=config["batch_size"],
        max_tokens=config["max_tokens"],
        dtype=config["storage_dtype"],
        device_map=device_map,
        code=code_hash("extract_hidden"),
    script:
        "../scripts/extract_hidden.py"
