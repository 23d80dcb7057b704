# The input and params functions of the rules in submodules.smk, which includes this file at its
# top. Those that several families share are in shared.smk.
from jtc.shortcuts.parts import jump_layers


def num_layers(model):
    return model_info(model)["num_layers"]


def jumps_of(model):
    """The jump layers of a model's sub-module runs."""
    return jump_layers(
        SUBMODULES["jump_layers"], SUBMODULES["jump_stride"], num_layers(model)
    )


def submodule_table_inputs(wildcards):
    """Every (jump layer, variant) run, and id's and mat's prediction scores beside them."""
    return {
        "replaced": paths.REPLACED.format(
            model=wildcards.model, corpus=wildcards.corpus
        ),
        **scores_of(wildcards, [m for m in ("id", "mat") if m in METHODS]),
    }
