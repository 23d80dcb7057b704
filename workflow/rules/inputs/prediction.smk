# The input and params functions of the rules in prediction.smk, which includes this file at its
# top. Those that several families share are in shared.smk.


def decode_inputs(wildcards):
    """The cached model (its head), the validation states, every fitted method's maps and,
    unless turned off, the shortlist check's factorisation."""
    inputs = {
        "model": checked_model_dir(wildcards.model, predict=True),
        "validation": hidden(wildcards, "validation"),
        **fitted_maps(wildcards),
    }
    if config["early_exit"]["shortlist_rank"]:
        inputs["shortlist"] = paths.SHORTLIST.format(
            model=wildcards.model, corpus=wildcards.corpus
        )
    return inputs


def shortlist_inputs(wildcards):
    """The cached model (its head) and the training states."""
    return {
        "model": checked_model_dir(wildcards.model, predict=True),
        "train": hidden(wildcards, "train"),
    }


def examples_inputs(wildcards):
    """Like decode_inputs, for every method, and the sentences."""
    inputs = {
        "model": checked_model_dir(wildcards.model, predict=True),
        "validation": hidden(wildcards, "validation"),
        "sentences": paths.CORPUS.format(corpus=wildcards.corpus),
    }
    for method in MAP_METHODS:
        inputs[method] = map_file(wildcards.model, wildcards.corpus, method)
    return inputs
