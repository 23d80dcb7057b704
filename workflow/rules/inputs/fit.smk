# The input and params functions of the rules in fit.smk, which includes this file at its
# top. Those that several families share are in shared.smk.
from jtc.shortcuts.methods import METHODS as METHOD_RECORDS


def fit_inputs(wildcards):
    """The training states; the model is checked first (e.g. a rank above its width)."""
    checked_model_dir(wildcards.model)
    return {"train": hidden(wildcards, "train")}


def closed_fit_inputs(wildcards):
    """fit_inputs, and the validation states every pair is scored on."""
    return {**fit_inputs(wildcards), "validation": hidden(wildcards, "validation")}


def train_inputs(wildcards):
    """The training states, and for a method trained through the decoder head (the tuned
    lens) the cached model, checked for a head."""
    if not METHOD_RECORDS[wildcards.method].needs_head:
        return fit_inputs(wildcards)
    return {
        "train": hidden(wildcards, "train"),
        "model": checked_model_dir(wildcards.model, predict=True),
    }
