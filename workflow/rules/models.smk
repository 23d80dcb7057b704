include: "inputs/models.smk"


checkpoint resolve_model:
    output:
        directory(paths.MODEL),
    log:
        "logs/resolve_model/{model}.log",
    benchmark:
        "benchmarks/resolve_model/{model}.tsv"
    conda:
        "../envs/jtc.yaml"
    resources:
        mem_mb=mem_mb("resolve_model"),
        runtime=runtime("resolve_model"),
    params:
        spec=cached_spec,
        code=code_hash("resolve_model"),
        content=model_content,
    script:
        "../scripts/resolve_model.py"
