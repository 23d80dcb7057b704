from jtc.pipeline.jobs import job
from jtc.stages.pruning import plot_pruning

o = snakemake.output
with job(snakemake):
    plot_pruning(
        snakemake.input.spans,
        snakemake.input.selected,
        o.spans_png,
        o.spans_pdf,
        o.selected_png,
        o.selected_pdf,
        model=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
    )
