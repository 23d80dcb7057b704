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
        "../../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=4000,
    params:
        code=code_hash("fit"),
    script:
        "../scripts/fit_mat.py"
