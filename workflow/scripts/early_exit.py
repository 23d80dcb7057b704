from jtc.stages.early_exit import early_exit
from jtc.workflow.jobs import job

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
        lambdas=p.lambdas,
        tau=p.tau,
        lambda_weight=p.lambda_weight,
        decay_weight=p.decay_weight,
        min_layer=p.min_layer,
        targets=p.targets,
        check_every=p.check_every,
        folds=p.folds,
        seed=p.seed,
        shortlist_rank=p.shortlist_rank,
        shortlist_candidates=p.shortlist_candidates,
    )
