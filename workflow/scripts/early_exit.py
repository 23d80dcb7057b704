from jtc.pipeline.jobs import job
from jtc.stages.early_exit import early_exit

p = snakemake.params
with job(snakemake):
    early_exit(
        {m: snakemake.input[m] for m in p.methods},
        snakemake.input.validation,
        snakemake.input.model,
        snakemake.input.parameters,
        snakemake.output.sweep,
        snakemake.output.savings,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        settings=p.settings,
        seed=p.seed,
    )
