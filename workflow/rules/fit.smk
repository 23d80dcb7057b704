rule fit_map:
    input:
        paths.fill(paths.HIDDEN, split="train"),
    output:
        paths.MAP,
    log:
        "logs/fit_map/{model}/{corpus}/{method}.log",
    benchmark:
        "benchmarks/fit_map/{model}/{corpus}/{method}.tsv"
    wildcard_constraints:
        method=_alternatives(CLOSED_FORM_METHODS),
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("fit_map"),
        runtime=runtime("fit_map"),
    params:
        settings=lambda w: config["training"].get(w.method, {}),
        code=code_hash("fit_map"),
    script:
        "../scripts/fit_map.py"


rule train_map:
    input:
        unpack(train_inputs),
    output:
        paths.MAP,
    log:
        "logs/train_map/{model}/{corpus}/{method}.log",
    benchmark:
        "benchmarks/train_map/{model}/{corpus}/{method}.tsv"
    wildcard_constraints:
        method=_alternatives(TRAINED_METHODS),
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("train_map"),
        runtime=runtime("train_map"),
    params:
        settings=lambda w: config["training"][w.method],
        seed=config["seed"],
        code=code_hash("train_map"),
    script:
        "../scripts/train_map.py"
