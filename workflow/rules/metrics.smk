include: "inputs/metrics.smk"


rule r2_table:
    input:
        unpack(r2_inputs),
    output:
        table=paths.metric("r2.parquet"),
        csv=paths.metric("r2.csv"),
        html=report(
            paths.metric("r2.html"),
            caption="../report/r2_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "r² of every layer pair"},
        ),
    log:
        "logs/r2_table/{model}/{corpus}.log",
    benchmark:
        "benchmarks/r2_table/{model}/{corpus}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("r2_table", "validation"),
        runtime=runtime("r2_table", "validation"),
        gpu_memory_percent=gpu_share("r2_table", "validation"),
    params:
        methods=lambda w: methods_for(w.model),
        # the closed-form methods, scored by fit_map
        scored=lambda w: [m for m in CLOSED_METHODS if m in methods_for(w.model)],
        code=code_hash("r2_table"),
    script:
        "../scripts/r2_table.py"


rule plot_r2:
    input:
        paths.metric("r2.parquet"),
    output:
        png=report(
            paths.figure("r2.png"),
            caption="../report/r2_heatmap.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "figure", "result": "r² heatmaps"},
        ),
        pdf=paths.figure("r2.pdf"),
    log:
        "logs/plot_r2/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        code=code_hash("plot_r2"),
    script:
        "../scripts/plot_r2.py"


rule parameter_table:
    input:
        unpack(parameter_inputs),
    output:
        table=paths.metric("parameters.parquet"),
        csv=paths.metric("parameters.csv"),
        html=report(
            paths.metric("parameters.html"),
            caption="../report/parameter_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "parameters per method"},
        ),
    log:
        "logs/parameter_table/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        code=code_hash("parameter_table"),
    script:
        "../scripts/parameter_table.py"
