# The shortcut maps, one file per (model, corpus, method). fit_map solves the closed-form
# methods (mat, rrr) in one job per (model, corpus), reading the training states once, scores
# every pair on the validation states as it goes (a table per method) and keeps the maps
# config maps says (into the last layer, or every pair);
# train_map trains one method by gradient descent (NJTC, N-NJTC, the one-map methods, and the
# tuned lens through the model's decoder head), one job per (model, corpus, method), on the
# rows its training.<method>.positions keeps: changing one trained method's settings retrains
# it alone. Each method's config block training.<method> is one param, read through its
# settings object (jtc.settings).
from jtc.shortcuts.methods import settings_param


include: "inputs/fit.smk"


if CLOSED_METHODS:

    rule fit_map:
        input:
            unpack(closed_fit_inputs),
        output:
            # one file each per method, in the order of params.settings
            maps=expand(paths.MAP, method=CLOSED_METHODS, allow_missing=True),
            r2=expand(paths.MAP_R2, method=CLOSED_METHODS, allow_missing=True),
        log:
            "logs/fit_map/{model}/{corpus}.log",
        benchmark:
            "benchmarks/fit_map/{model}/{corpus}.tsv"
        conda:
            "../envs/jtc.yaml"
        threads: config["threads"]
        resources:
            mem_mb=mem_mb("fit_map"),
            runtime=runtime("fit_map"),
            gpu_memory_percent=gpu_share("fit_map"),
        params:
            settings={m: settings_param(config, m) for m in CLOSED_METHODS},
            maps=config["maps"],
            seed=config["seed"],
            code=code_hash("fit_map"),
        script:
            "../scripts/fit_map.py"


rule train_map:
    input:
        unpack(train_inputs),
    output:
        paths.MAP,
    log:
        "logs/train_map/{model}/{corpus}/{method}.log",
    benchmark:
        "benchmarks/train_map/{model}/{corpus}/{method}.tsv"
    wildcard_constraints:
        method=_alternatives(TRAINED_METHODS),
    conda:
        "../envs/jtc.yaml"
    threads: config["threads"]
    resources:
        mem_mb=mem_mb("train_map"),
        runtime=runtime("train_map"),
        gpu_memory_percent=gpu_share("train_map"),
    params:
        settings=lambda w: settings_param(config, w.method),
        seed=config["seed"],
        code=code_hash("train_map"),
    script:
        "../scripts/train_map.py"
