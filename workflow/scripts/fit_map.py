from jtc.pipeline.jobs import job
from jtc.stages.fit import fit_map

p = snakemake.params
with job(snakemake):
    fit_map(
        snakemake.input.train,
        snakemake.input.validation,
        dict(zip(p.settings, snakemake.output.maps, strict=True)),
        dict(zip(p.settings, snakemake.output.r2, strict=True)),
        settings={m: dict(s) for m, s in p.settings.items()},
        maps=dict(p.maps),
        seed=p.seed,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        threads=snakemake.threads,
    )
