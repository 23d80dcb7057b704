rule fit_mat:
    input:
        paths.fill(paths.HIDDEN, split="train"),
    output:
        paths.fill(paths.MAP, method="mat"),
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
        code=code_hash("fit_mat"),
    script:
        "../scripts/fit_mat.py"


rule train_map:
    input:
        unpack(train_inputs),
    output:
        paths.MAP,
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
        code=code_hash("train_map"),
    script:
        "../scripts/train_map.py"
