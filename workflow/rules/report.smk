include: "inputs/report.smk"


rule headline_table:
    input:
        unpack(headline_inputs),
    output:
        table=paths.HEADLINE,
        csv=paths.HEADLINE.replace(".parquet", ".csv"),
        html=report(
            paths.HEADLINE.replace(".parquet", ".html"),
            caption="../report/headline_table.rst",
            category="summary",
            labels={"kind": "table", "result": "headline numbers"},
        ),
        landing=paths.LANDING,
    log:
        "logs/headline_table/headline.log",
    conda:
        "../envs/jtc.yaml"
    params:
        pairs=headline_pairs(),
        template=landing_template(),
        code=code_hash("headline_table"),
    script:
        "../scripts/headline_table.py"
