rule fit_mat:
    input:
        "results/hidden/{model}/{corpus}/train",
    output:
        "results/maps/{model}/{corpus}/mat/from_{source}.safetensors",
    log:
        "logs/fit_mat/{model}/{corpus}/from_{source}.log",
    benchmark:
        "benchmarks/fit_mat/{model}/{corpus}/from_{source}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("fit_mat"),
        runtime=runtime("fit_mat"),
    params:
        code=code_hash("fit", "maps"),
    script:
        "../scripts/fit_mat.py"


rule train_map:
    input:
        unpack(train_inputs),
    output:
        "results/maps/{model}/{corpus}/{method}/from_{source}.safetensors",
    log:
        "logs/train_map/{model}/{corpus}/{method}/from_{source}.log",
    benchmark:
        "benchmarks/train_map/{model}/{corpus}/{method}/from_{source}.tsv"
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
        code=code_hash("maps", "train", "decode", "adapters", "models"),
    script:
        "../scripts/train_map.py"
