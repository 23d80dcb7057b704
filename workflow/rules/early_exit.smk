from jtc.settings import EarlyExitSettings


include: "inputs/early_exit.smk"


rule early_exit:
    input:
        unpack(early_exit_inputs),
    output:
        sweep=paths.metric("early_exit.parquet"),
        sweep_csv=paths.metric("early_exit.csv"),
        sweep_html=report(
            paths.metric("early_exit.html"),
            caption="../report/early_exit_table.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "early exit: λ sweep and fixed exits"},
        ),
        savings=paths.metric("early_exit_savings.parquet"),
        savings_csv=paths.metric("early_exit_savings.csv"),
        savings_html=report(
            paths.metric("early_exit_savings.html"),
            caption="../report/early_exit_savings.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "table", "result": "early exit: layers saved"},
        ),
    log:
        "logs/early_exit/{model}/{corpus}.log",
    benchmark:
        "benchmarks/early_exit/{model}/{corpus}.tsv"
    conda:
        "../envs/jtc.yaml"
    params:
        methods=METHODS,
        settings=EarlyExitSettings.param(config),
        seed=config["seed"],
        code=code_hash("early_exit"),
    script:
        "../scripts/early_exit.py"


rule plot_early_exit:
    input:
        sweep=paths.metric("early_exit.parquet"),
        savings=paths.metric("early_exit_savings.parquet"),
    output:
        png=report(
            paths.figure("early_exit.png"),
            caption="../report/early_exit.rst",
            category="{model}",
            subcategory="{corpus}",
            labels={"kind": "figure", "result": "early exit"},
        ),
        pdf=paths.figure("early_exit.pdf"),
    log:
        "logs/plot_early_exit/{model}/{corpus}.log",
    conda:
        "../envs/jtc.yaml"
    params:
        code=code_hash("plot_early_exit"),
    script:
        "../scripts/plot_early_exit.py"
