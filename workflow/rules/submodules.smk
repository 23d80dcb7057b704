# Linear shortcuts across sub-modules (README, "Sub-module shortcuts"): record every block
# part's input and output, fit a map per (block, part), and run the model with a part
# replaced in every block after a jump layer. Each (model, corpus, variant, jump) is its own
# job; the states below a jump layer are computed once per jump layer and shared by the
# variants (temporary files, removed once every variant has run).


rule record_parts:
    input:
        model=lambda w: part_model_dir(w.model),
        sentences="results/corpora/{corpus}.parquet",
    output:
        directory("results/parts/{model}/{corpus}/{split}"),
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
    params:
        n=lambda w: config["sizes"][w.split],
        seed=config["seed"],
        batch_size=config["batch_size"],
        max_tokens=config["max_tokens"],
        dtype=config["storage_dtype"],
        parts=True,
        code=code_hash("corpus", "models", "adapters", "extract"),
    script:
        "../scripts/extract_hidden.py"


rule fit_parts:
    input:
        "results/parts/{model}/{corpus}/train",
    output:
        "results/maps/{model}/{corpus}/parts.safetensors",
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
    params:
        code=code_hash("parts", "fit", "maps", "part_stages"),
    script:
        "../scripts/fit_parts.py"


rule part_r2_table:
    input:
        validation="results/parts/{model}/{corpus}/validation",
        maps="results/maps/{model}/{corpus}/parts.safetensors",
    output:
        table="results/metrics/{model}/{corpus}/parts_r2.parquet",
        csv=report(
            "results/metrics/{model}/{corpus}/parts_r2.csv",
            caption="../report/parts_r2_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"table": "r² of every block part"},
        ),
    log:
        "logs/part_r2_table/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        code=code_hash("parts", "maps", "metrics", "part_stages"),
    script:
        "../scripts/part_r2_table.py"


rule plot_part_r2:
    input:
        "results/metrics/{model}/{corpus}/parts_r2.parquet",
    output:
        png=report(
            "results/figures/{model}/{corpus}/parts_r2.png",
            caption="../report/parts_r2.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"figure": "r² of every block part"},
        ),
        pdf="results/figures/{model}/{corpus}/parts_r2.pdf",
    log:
        "logs/plot_part_r2/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        code=code_hash("plots", "part_stages"),
    script:
        "../scripts/plot_part_r2.py"


rule prefix_states:
    input:
        model=lambda w: part_model_dir(w.model),
        sentences="results/corpora/{corpus}.parquet",
        validation="results/hidden/{model}/{corpus}/validation",
    output:
        temp("results/submodules/{model}/{corpus}/prefix/jump_{jump}.parquet"),
    log:
        "logs/prefix_states/{model}/{corpus}/jump_{jump}.log",
    benchmark:
        "benchmarks/prefix_states/{model}/{corpus}/jump_{jump}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("prefix_states", "validation"),
        runtime=runtime("prefix_states", "validation"),
    params:
        sentences=config["submodules"]["sentences"],
        batch_size=config["batch_size"],
        code=code_hash("adapters", "models", "extract", "replace", "part_stages"),
    script:
        "../scripts/prefix_states.py"


rule replace_parts:
    input:
        model=lambda w: part_model_dir(w.model),
        validation="results/hidden/{model}/{corpus}/validation",
        prefix="results/submodules/{model}/{corpus}/prefix/jump_{jump}.parquet",
        maps="results/maps/{model}/{corpus}/parts.safetensors",
    output:
        "results/submodules/{model}/{corpus}/{variant}/jump_{jump}.parquet",
    log:
        "logs/replace_parts/{model}/{corpus}/{variant}/jump_{jump}.log",
    benchmark:
        "benchmarks/replace_parts/{model}/{corpus}/{variant}/jump_{jump}.tsv"
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("replace_parts", "validation"),
        runtime=runtime("replace_parts", "validation"),
    params:
        parts=lambda w: VARIANTS[w.variant],
        top_k=max(config["prediction"]["top_k"]),
        batch_size=config["batch_size"],
        code=code_hash(
            "adapters",
            "models",
            "extract",
            "replace",
            "maps",
            "decode",
            "parts",
            "part_stages",
        ),
    script:
        "../scripts/replace_parts.py"


rule submodule_table:
    input:
        unpack(submodule_table_inputs),
    output:
        table="results/metrics/{model}/{corpus}/submodules.parquet",
        csv=report(
            "results/metrics/{model}/{corpus}/submodules.csv",
            caption="../report/submodules_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"table": "parts replaced after a jump layer"},
        ),
    log:
        "logs/submodule_table/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        variants=config["submodules"]["variants"],
        top_k=config["prediction"]["top_k"],
        bootstrap=config["prediction"]["bootstrap"],
        level=config["prediction"]["confidence_level"],
        seed=config["seed"],
        code=code_hash("prediction", "part_stages"),
    script:
        "../scripts/submodule_table.py"


rule plot_submodules:
    input:
        "results/metrics/{model}/{corpus}/submodules.parquet",
    output:
        png=report(
            "results/figures/{model}/{corpus}/submodules.png",
            caption="../report/submodules.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"figure": "parts replaced after a jump layer"},
        ),
        pdf="results/figures/{model}/{corpus}/submodules.pdf",
    log:
        "logs/plot_submodules/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        code=code_hash("plots", "part_stages"),
    script:
        "../scripts/plot_submodules.py"
