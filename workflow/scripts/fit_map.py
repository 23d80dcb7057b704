from jtc.pipeline.jobs import job
from jtc.stages.fit import fit_map

p = snakemake.params
with job(snakemake):
    fit_map(
        snakemake.input.train,
        dict(zip(p.settings, snakemake.output, strict=True)),
        settings={m: dict(s) for m, s in p.settings.items()},
        seed=p.seed,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        threads=snakemake.threads,
    )
