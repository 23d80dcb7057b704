# Linear shortcuts across sub-modules (docs/method.md): record every block part's input and
# output, fit a map per (block, part), and run the model with parts replaced in every block
# after a jump layer. One replace_parts job per (model, corpus) runs every (jump layer, variant):
# one unmodified pass gives the states at every jump layer, shared by all the runs.

from jtc.settings import IntervalSettings


include: "inputs/submodules.smk"


rule record_parts:
    input:
        model=lambda w: checked_model_dir(w.model, parts=True),
        sentences=paths.CORPUS,
    output:
        directory(paths.PARTS),
    log:
        "logs/record_parts/{model}/{corpus}/{split}.log",
    benchmark:
        "benchmarks/record_parts/{model}/{corpus}/{split}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("record_parts"),
        runtime=runtime("record_parts"),
        gpu_memory_percent=gpu_share("record_parts"),
    params:
        n=lambda w: config["sizes"][w.split],
        positions=positions,
        seed=config["seed"],
        batch_size=config["batch_size"],
        max_tokens=config["max_tokens"],
        dtype=config["storage_dtype"],
        device_map=device_map,
        code=code_hash("record_parts"),
    script:
        "../scripts/record_parts.py"


rule fit_parts:
    input:
        paths.fill(paths.PARTS, split="train"),
    output:
        paths.PART_MAP,
    log:
        "logs/fit_parts/{model}/{corpus}.log",
    benchmark:
        "benchmarks/fit_parts/{model}/{corpus}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("fit_parts"),
        runtime=runtime("fit_parts"),
        gpu_memory_percent=gpu_share("fit_parts"),
    params:
        code=code_hash("fit_parts"),
    script:
        "../scripts/fit_parts.py"


rule part_r2_table:
    input:
        validation=paths.fill(paths.PARTS, split="validation"),
        maps=paths.PART_MAP,
    output:
        table=paths.metric("parts_r2.parquet"),
        csv=paths.metric("parts_r2.csv"),
        html=report(
            paths.metric("parts_r2.html"),
            caption="../report/parts_r2_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "r² of every block part"},
        ),
    log:
        "logs/part_r2_table/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    resources:
        gpu_memory_percent=gpu_share("part_r2_table", "validation"),
    params:
        code=code_hash("part_r2_table"),
    script:
        "../scripts/part_r2_table.py"


rule plot_part_r2:
    input:
        paths.metric("parts_r2.parquet"),
    output:
        png=report(
            paths.figure("parts_r2.png"),
            caption="../report/parts_r2.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "figure", "result": "r² of every block part"},
        ),
        pdf=paths.figure("parts_r2.pdf"),
    log:
        "logs/plot_part_r2/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        code=code_hash("plot_part_r2"),
    script:
        "../scripts/plot_part_r2.py"


rule replace_parts:
    input:
        model=lambda w: checked_model_dir(w.model, parts=True),
        sentences=paths.CORPUS,
        validation=paths.fill(paths.HIDDEN, split="validation"),
        maps=paths.PART_MAP,
    output:
        paths.REPLACED,
    log:
        "logs/replace_parts/{model}/{corpus}.log",
    benchmark:
        "benchmarks/replace_parts/{model}/{corpus}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("replace_parts", "validation"),
        runtime=runtime("replace_parts", "validation"),
        gpu_memory_percent=gpu_share("replace_parts", "validation"),
    params:
        variants={v: VARIANTS[v] for v in SUBMODULES["variants"]},
        jumps=lambda w: jumps_of(w.model),
        sentences=config["submodules"]["sentences"],
        top_k=max(config["prediction"]["top_k"]),
        batch_size=config["batch_size"],
        device_map=device_map,
        code=code_hash("replace_parts"),
    script:
        "../scripts/replace_parts.py"


rule submodule_table:
    input:
        unpack(submodule_table_inputs),
    output:
        table=paths.metric("submodules.parquet"),
        csv=paths.metric("submodules.csv"),
        html=report(
            paths.metric("submodules.html"),
            caption="../report/submodules_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "parts replaced after a jump layer"},
        ),
    log:
        "logs/submodule_table/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        settings=IntervalSettings.param(config),
        seed=config["seed"],
        code=code_hash("submodule_table"),
    script:
        "../scripts/submodule_table.py"


rule plot_submodules:
    input:
        paths.metric("submodules.parquet"),
    output:
        png=report(
            paths.figure("submodules.png"),
            caption="../report/submodules.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "figure", "result": "parts replaced after a jump layer"},
        ),
        pdf=paths.figure("submodules.pdf"),
    log:
        "logs/plot_submodules/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        code=code_hash("plot_submodules"),
    script:
        "../scripts/plot_submodules.py"
