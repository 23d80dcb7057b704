from jtc.pipeline.jobs import job
from jtc.stages.submodules import submodule_table

p = snakemake.params
with job(snakemake):
    submodule_table(
        snakemake.input.replaced,
        {m: snakemake.input[m] for m in ("id", "mat") if m in snakemake.input.keys()},
        snakemake.output.table,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        settings=p.settings,
        seed=p.seed,
    )
