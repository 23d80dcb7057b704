from jtc.pipeline.jobs import job
from jtc.stages.prediction import decode_predictions

p = snakemake.params
with job(snakemake):
    decode_predictions(
        snakemake.input.model,
        snakemake.input.validation,
        {m: snakemake.input.get(m) for m in p.methods},
        dict(zip(p.methods, snakemake.output, strict=True)),
        model=snakemake.wildcards.model,
        top_k=p.top_k,
        threads=snakemake.threads,
        shortlist=snakemake.input.get("shortlist"),
        candidates=p.candidates,
    )
