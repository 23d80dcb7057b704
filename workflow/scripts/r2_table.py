from jtc.pipeline.jobs import job
from jtc.stages.metrics import r2_table

p = snakemake.params
with job(snakemake):
    r2_table(
        snakemake.input.validation,
        {m: snakemake.input.get(m) for m in p.methods if m not in p.scored},
        {m: snakemake.input[f"{m}_r2"] for m in p.scored},
        snakemake.output.table,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        threads=snakemake.threads,
    )
