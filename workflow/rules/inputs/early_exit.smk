# The input and params functions of the rules in early_exit.smk, which includes this file at its
# top. Those that several families share are in shared.smk.


def early_exit_inputs(wildcards):
    """Every method's per-position scores and the validation states; checks min_layer."""
    return {
        "model": checked_model_dir(wildcards.model, predict=True),
        "parameters": paths.metric("parameters.parquet").format(**wildcards),
        "validation": hidden(wildcards, "validation"),
        **scores_of(wildcards, METHODS),
    }
