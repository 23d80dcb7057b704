# Depth pruning with linear shortcuts (docs/method.md): remove n consecutive blocks and stand in
# for them (the variants of jtc.pruning.variants). One calibrate_pruning
# job per (model, corpus) sums what every span needs over every token of the calibration
# text (windows of running text, or sentences: jtc.pruning.windows), fits every span's maps and chooses a span per length and selection rule; one
# run_pruned job runs every span on the evaluation sentences and the chosen spans on the selected sentences; `snakemake pruned`
# writes the chosen pruned model as a Hugging Face folder (and checks each one it hands over).

from jtc.files.stamps import verify_folders
from jtc.settings import (
    CalibrationSettings,
    ExportSettings,
    IntervalSettings,
    SpanRunSettings,
)
from jtc.pruning.windows import held_out_sentences


rule calibrate_pruning:
    input:
        model=lambda w: checked_model_dir(w.model, prune=True),
        sentences=lambda w: checked_sentences(w.corpus, "calibrate_pruning"),
    output:
        maps=paths.pruning("maps.safetensors"),
        calibration=paths.pruning("calibration.parquet"),
        selection=paths.pruning("selection.parquet"),
    log:
        "logs/calibrate_pruning/{model}/{corpus}.log",
    benchmark:
        "benchmarks/calibrate_pruning/{model}/{corpus}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("calibrate_pruning"),
        runtime=runtime("calibrate_pruning"),
        gpu_memory_percent=gpu_share("calibrate_pruning"),
    params:
        settings=CalibrationSettings.param(config),
        held_out=held_out_sentences(
            config["pruning"]["calibration"]["text"],
            config["pruning"]["evaluation_sentences"],
            config["pruning"]["selected_sentences"],
            config["pruning"]["generation"]["prompts"],
        ),
        batch_size=config["batch_size"],
        max_tokens=config["max_tokens"],
        device_map=device_map,
        code=code_hash("calibrate_pruning"),
    script:
        "../scripts/calibrate_pruning.py"


rule run_pruned:
    input:
        model=lambda w: checked_model_dir(w.model, prune=True),
        sentences=lambda w: checked_sentences(w.corpus, "run_pruned"),
        maps=paths.pruning("maps.safetensors"),
        selection=paths.pruning("selection.parquet"),
    output:
        runs=paths.pruning("runs.parquet"),
        selected=paths.pruning("selected_runs.parquet"),
    log:
        "logs/run_pruned/{model}/{corpus}.log",
    benchmark:
        "benchmarks/run_pruned/{model}/{corpus}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("run_pruned", "validation"),
        runtime=runtime("run_pruned", "validation"),
        gpu_memory_percent=gpu_share("run_pruned", "validation"),
    params:
        settings=SpanRunSettings.param(config),
        batch_size=config["batch_size"],
        max_tokens=config["max_tokens"],
        device_map=device_map,
        code=code_hash("run_pruned"),
    script:
        "../scripts/run_pruned.py"


rule pruning_tables:
    input:
        runs=paths.pruning("runs.parquet"),
        selected_runs=paths.pruning("selected_runs.parquet"),
        calibration=paths.pruning("calibration.parquet"),
        selection=paths.pruning("selection.parquet"),
    output:
        spans=paths.metric("pruning_spans.parquet"),
        spans_csv=paths.metric("pruning_spans.csv"),
        spans_html=report(
            paths.metric("pruning_spans.html"),
            caption="../report/pruning_spans_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "depth pruning: every span"},
        ),
        selected=paths.metric("pruning_selected.parquet"),
        selected_csv=paths.metric("pruning_selected.csv"),
        selected_html=report(
            paths.metric("pruning_selected.html"),
            caption="../report/pruning_selected_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "depth pruning: the chosen spans"},
        ),
    log:
        "logs/pruning_tables/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        settings=IntervalSettings.param(config),
        seed=config["seed"],
        code=code_hash("pruning_tables"),
    script:
        "../scripts/pruning_tables.py"


rule plot_pruning:
    input:
        spans=paths.metric("pruning_spans.parquet"),
        selected=paths.metric("pruning_selected.parquet"),
    output:
        spans_png=report(
            paths.figure("pruning_spans.png"),
            caption="../report/pruning_spans.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "figure", "result": "depth pruning: every span"},
        ),
        spans_pdf=paths.figure("pruning_spans.pdf"),
        selected_png=report(
            paths.figure("pruning_selection.png"),
            caption="../report/pruning_selection.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "figure", "result": "depth pruning: the chosen spans"},
        ),
        selected_pdf=paths.figure("pruning_selection.pdf"),
    log:
        "logs/plot_pruning/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        code=code_hash("plot_pruning"),
    script:
        "../scripts/plot_pruning.py"


rule export_pruned:
    input:
        model=lambda w: checked_model_dir(w.model, prune=True),
        maps=paths.pruning("maps.safetensors"),
        selection=paths.pruning("selection.parquet"),
    output:
        directory(paths.PRUNED),
    log:
        "logs/export_pruned/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("export_pruned"),
    params:
        settings=ExportSettings.param(config),
        code=code_hash("export_pruned"),
    script:
        "../scripts/export_pruned.py"


rule pruned:
    input:
        pruned_folders(),
    log:
        "logs/pruned.log",
    localrule: True
    run:
        # every file of each checkpoint against the sha256 its job recorded, mtime or not
        # (planning compares sizes, and hashes files whose mtime changed: jtc.files.digests)
        verify_folders(list(input))
