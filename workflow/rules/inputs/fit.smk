# The input and params functions of the rules in fit.smk, which includes this file at its
# top. Those that several families share are in shared.smk.


def fit_inputs(wildcards):
    """The training states; the model is checked first (e.g. a rank above its width)."""
    checked_model_dir(wildcards.model)
    return {"train": hidden(wildcards, "train")}


def train_inputs(wildcards):
    """The training states and the cached model, checked for a decoder head."""
    return {
        "train": hidden(wildcards, "train"),
        "model": checked_model_dir(wildcards.model, predict=True),
    }
