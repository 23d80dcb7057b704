# Pruned models measured as the pruning literature does (docs/method.md, jtc.measures): the
# full model and each length and variant at the span pruning.export_selection chose, built in
# memory. One context_perplexity job per (model, corpus) scores windows of held-out documents;
# one generation_fidelity job continues held-out prompts greedily; measure_tables tabulates both
# with bootstrap intervals over windows and prompts. `snakemake measures` runs them (`all` too,
# with pruning.measures_in_all).

from jtc.settings import (
    ContextMeasuredSettings,
    ContextSettings,
    GenerationMeasuredSettings,
    GenerationSettings,
    IntervalSettings,
)
from jtc.pruning.windows import held_out_sentences


rule context_perplexity:
    input:
        model=lambda w: checked_model_dir(w.model, prune=True),
        sentences=lambda w: checked_sentences(w.corpus, "context_perplexity"),
        maps=paths.pruning("maps.safetensors"),
        selection=paths.pruning("selection.parquet"),
    output:
        paths.pruning("context_windows.parquet"),
    log:
        "logs/context_perplexity/{model}/{corpus}.log",
    benchmark:
        "benchmarks/context_perplexity/{model}/{corpus}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("context_perplexity"),
        runtime=runtime("context_perplexity"),
        gpu_memory_percent=gpu_share("context_perplexity"),
    params:
        settings=ContextSettings.param(config),
        measured=ContextMeasuredSettings.param(config),
        held_out=held_out_sentences(
            config["pruning"]["calibration"]["text"],
            config["pruning"]["evaluation_sentences"],
            config["pruning"]["selected_sentences"],
            config["pruning"]["generation"]["prompts"],
        ),
        batch_size=config["batch_size"],
        device_map=device_map,
        code=code_hash("context_perplexity"),
    script:
        "../scripts/context_perplexity.py"


rule generation_fidelity:
    input:
        model=lambda w: checked_model_dir(w.model, prune=True),
        sentences=lambda w: checked_sentences(w.corpus, "generation_fidelity"),
        maps=paths.pruning("maps.safetensors"),
        selection=paths.pruning("selection.parquet"),
    output:
        paths.pruning("generation_prompts.parquet"),
    log:
        "logs/generation_fidelity/{model}/{corpus}.log",
    benchmark:
        "benchmarks/generation_fidelity/{model}/{corpus}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("generation_fidelity"),
        runtime=runtime("generation_fidelity"),
        gpu_memory_percent=gpu_share("generation_fidelity"),
    params:
        settings=GenerationSettings.param(config),
        measured=GenerationMeasuredSettings.param(config),
        batch_size=config["batch_size"],
        max_tokens=config["max_tokens"],
        device_map=device_map,
        code=code_hash("generation_fidelity"),
    script:
        "../scripts/generation_fidelity.py"


rule measure_tables:
    input:
        windows=paths.pruning("context_windows.parquet"),
        prompts=paths.pruning("generation_prompts.parquet"),
    output:
        context=paths.metric("pruning_context.parquet"),
        context_csv=paths.metric("pruning_context.csv"),
        context_html=report(
            paths.metric("pruning_context.html"),
            caption="../report/pruning_context_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={
                "kind": "table",
                "result": "depth pruning: perplexity at a real context",
            },
        ),
        generation=paths.metric("pruning_generation.parquet"),
        generation_csv=paths.metric("pruning_generation.csv"),
        generation_html=report(
            paths.metric("pruning_generation.html"),
            caption="../report/pruning_generation_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "depth pruning: generation fidelity"},
        ),
    log:
        "logs/measure_tables/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        settings=IntervalSettings.param(config),
        seed=config["seed"],
        code=code_hash("measure_tables"),
    script:
        "../scripts/measure_tables.py"


rule measures:
    input:
        [
            paths.metric(f"pruning_{name}.parquet").format(model=m, corpus=c)
            for m in MODELS
            for c in CORPORA
            if EXPERIMENT.prunes(m, c)
            for name in ("context", "generation")
        ],
