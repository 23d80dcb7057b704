from jtc.settings import ExampleSettings, IntervalSettings


include: "inputs/prediction.smk"


rule fit_shortlist:
    input:
        unpack(shortlist_inputs),
    output:
        paths.SHORTLIST,
    log:
        "logs/fit_shortlist/{model}/{corpus}.log",
    benchmark:
        "benchmarks/fit_shortlist/{model}/{corpus}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("fit_shortlist", "train"),
        runtime=runtime("fit_shortlist", "train"),
        gpu_memory_percent=gpu_share("fit_shortlist", "train"),
    params:
        rank=config["early_exit"]["shortlist_rank"],
        code=code_hash("fit_shortlist"),
    script:
        "../scripts/fit_shortlist.py"


rule decode_predictions:
    input:
        unpack(decode_inputs),
    output:
        # one table per method, in the order of params.methods
        expand(paths.SCORES, method=METHODS, allow_missing=True),
    log:
        "logs/decode_predictions/{model}/{corpus}.log",
    benchmark:
        "benchmarks/decode_predictions/{model}/{corpus}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("decode_predictions", "validation"),
        runtime=runtime("decode_predictions", "validation"),
        gpu_memory_percent=gpu_share("decode_predictions", "validation"),
    params:
        methods=METHODS,
        top_k=max(config["prediction"]["top_k"]),
        candidates=config["early_exit"]["shortlist_candidates"],
        code=code_hash("decode_predictions"),
    script:
        "../scripts/decode_predictions.py"


rule prediction_table:
    input:
        expand(paths.SCORES, method=METHODS, allow_missing=True),
    output:
        table=paths.metric("prediction.parquet"),
        csv=paths.metric("prediction.csv"),
        html=report(
            paths.metric("prediction.html"),
            caption="../report/prediction_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "prediction metrics by layer"},
        ),
    log:
        "logs/prediction_table/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        methods=METHODS,
        settings=IntervalSettings.param(config),
        seed=config["seed"],
        code=code_hash("prediction_table"),
    script:
        "../scripts/prediction_table.py"


rule plot_prediction:
    input:
        paths.metric("prediction.parquet"),
    output:
        png=report(
            paths.figure("prediction.png"),
            caption="../report/prediction.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "figure", "result": "prediction by layer"},
        ),
        pdf=paths.figure("prediction.pdf"),
    log:
        "logs/plot_prediction/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        code=code_hash("plot_prediction"),
    script:
        "../scripts/plot_prediction.py"


rule prediction_examples:
    input:
        unpack(examples_inputs),
    output:
        table=paths.metric("examples.parquet"),
        csv=paths.metric("examples.csv"),
        markdown=paths.metric("examples.md"),
        html=report(
            paths.metric("examples.html"),
            caption="../report/examples.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "example predictions"},
        ),
    log:
        "logs/prediction_examples/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("prediction_examples", "validation"),
        runtime=runtime("prediction_examples", "validation"),
        gpu_memory_percent=gpu_share("prediction_examples", "validation"),
    params:
        methods=METHODS,
        settings=ExampleSettings.param(config),
        code=code_hash("prediction_examples"),
    script:
        "../scripts/prediction_examples.py"
