# The input and params functions of the rules in metrics.smk, which includes this file at its
# top. Those that several families share are in shared.smk.


def r2_inputs(wildcards):
    """Validation states, plus the map file of each trained method and the r² table of each
    closed-form method (scored by fit_map)."""
    closed = [m for m in CLOSED_METHODS if m in methods_for(wildcards.model)]
    maps = {m: f for m, f in fitted_maps(wildcards).items() if m not in closed}
    scored = {
        f"{m}_r2": paths.MAP_R2.format(
            model=wildcards.model, corpus=wildcards.corpus, method=m
        )
        for m in closed
    }
    return {"validation": hidden(wildcards, "validation"), **maps, **scored}


def parameter_inputs(wildcards):
    """The cached model's shape, and the map file of each fitted method."""
    return {"model": model_dir(wildcards.model), **fitted_maps(wildcards)}
