# The input and params functions of the rules in metrics.smk, which includes this file at its
# top. Those that several families share are in shared.smk.


def r2_inputs(wildcards):
    """Validation states, plus the map file of each fitted method."""
    return {"validation": hidden(wildcards, "validation"), **fitted_maps(wildcards)}


def parameter_inputs(wildcards):
    """The cached model's shape, and the map file of each fitted method."""
    return {"model": model_dir(wildcards.model), **fitted_maps(wildcards)}
