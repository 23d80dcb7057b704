from jtc.pipeline.jobs import job
from jtc.stages.fit import train_map

with job(snakemake):
    p = snakemake.params
    train_map(
        snakemake.input.train,
        snakemake.output[0],
        model_dir=snakemake.input.get("model"),
        method=snakemake.wildcards.method,
        settings=dict(p.settings),
        seed=p.seed,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        threads=snakemake.threads,
    )
