import hashlib
import json
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from jtc.adapters import UnsupportedArchitecture, missing_head_message, part_adapter
from jtc.config import ConfigError, layer_problem
from jtc.locks import clear_stale_locks
from jtc.methods import METHODS as METHOD_SPECS, applicable
from jtc.parts import VARIANTS, jump_layers, jump_problem
from jtc.planning import checked_config
from jtc.resources import Shape, memory_mb, runtime_minutes

try:
    _checked = checked_config(config, workflow.configfiles)
except ConfigError as err:
    raise WorkflowError(f"invalid configuration: {err}") from None
config.clear()
config.update(_checked)

# a run killed with SIGKILL leaves its locks; with no other Snakemake working here, drop them
# so that a plain rerun resumes (workflow/profiles/default adds --rerun-incomplete for its last jobs)
if workflow.is_main_process:
    for _lock in clear_stale_locks():
        print(
            f"jtc: removed a stale lock left by an interrupted run: {_lock}",
            file=sys.stderr,
        )

PACKAGE = Path(SRC) / "jtc"
MODELS = list(config["models"])
CORPORA = list(config["corpora"])
METHODS = list(config["methods"])
MAP_METHODS = [m for m in METHODS if m != "id"]
TRAINED_METHODS = [m for m in METHODS if METHOD_SPECS[m].trained]
PREDICTING = [m for m in MODELS if config["models"][m]["predict"]]
SUBMODULES = config["submodules"]
SUBMODULE_CORPORA = SUBMODULES["corpora"] or CORPORA


def _alternatives(names):
    """A regex matching exactly these names; one that matches nothing for no names."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


wildcard_constraints:
    model=_alternatives(MODELS),
    corpus=_alternatives(CORPORA),
    split="train|validation",
    source=r"\d+",
    method=_alternatives(config["methods"]),
    variant=_alternatives(SUBMODULES["variants"]),
    jump=r"\d+",


def code_hash(*modules):
    """Hash of the package modules a stage runs, so that editing them reruns the stage."""
    digest = hashlib.sha256()
    for module in ("io", "logs", "pipeline", *modules):
        digest.update((PACKAGE / f"{module}.py").read_bytes())
    return digest.hexdigest()[:16]


def _shape(wildcards, split):
    """The model's shape once it is cached (a large default before), and the sentences read."""
    split = getattr(wildcards, "split", split)
    return Shape.of(
        f"results/models/{wildcards.model}",
        config["sizes"][split],
        config["max_tokens"],
    )


def _epochs(wildcards):
    """Epochs of a trained method's job (training.<method> is always filled in); else 1."""
    return (
        config["training"]
        .get(getattr(wildcards, "method", None), {})
        .get("max_epochs", 1)
    )


def mem_mb(stage, split="train"):
    """A job's memory request: grows with the model, the sentences and the attempt."""
    return lambda wildcards, attempt: memory_mb(
        stage, _shape(wildcards, split), attempt
    )


def runtime(stage, split="train"):
    """A job's wall-time request (minutes), likewise."""
    return lambda wildcards, attempt: runtime_minutes(
        stage, _shape(wildcards, split), attempt, _epochs(wildcards)
    )


def model_dir(model):
    return checkpoints.resolve_model.get(model=model).output[0]


def model_info(model):
    """A model's info.json, known once its resolve_model checkpoint has run."""
    return json.loads(Path(model_dir(model), "info.json").read_text())


def num_layers(model):
    return model_info(model)["num_layers"]


def predicting_model_dir(model):
    """The cached model, refused (while planning) when it has no decoder head."""
    info = model_info(model)
    if not info["has_lm_head"]:
        raise WorkflowError(
            missing_head_message(model, info["task"], info["model_class"])
        )
    return model_dir(model)


def part_model_dir(model):
    """The cached model, refused (while planning) when its architecture has no block-part
    adapter or a configured jump layer is beyond its depth."""
    info = model_info(model)
    try:
        part_adapter(info["architecture"])
    except UnsupportedArchitecture as err:
        raise WorkflowError(f"model '{model}': {err}") from None
    problem = jump_problem(model, info["num_layers"], SUBMODULES["jump_layers"])
    if problem:
        raise WorkflowError(f"invalid configuration: {problem}")
    return predicting_model_dir(model)


def submodule_table_inputs(wildcards):
    """Every (variant, jump layer) run, and id's and mat's prediction scores beside them."""
    jumps = jump_layers(
        SUBMODULES["jump_layers"],
        SUBMODULES["jump_stride"],
        num_layers(wildcards.model),
    )
    folder = f"results/submodules/{wildcards.model}/{wildcards.corpus}"
    inputs = {
        variant: expand(f"{folder}/{variant}/jump_{{jump}}.parquet", jump=jumps)
        for variant in SUBMODULES["variants"]
    }
    for method in ("id", "mat"):
        if method in METHODS:
            inputs[method] = (
                f"results/predictions/{wildcards.model}/{wildcards.corpus}/{method}.parquet"
            )
    return inputs


def methods_for(model):
    """The configured methods that apply to a model (the tuned lens needs a decoder head)."""
    return [m for m in METHODS if applicable(m, config["models"][model]["predict"])]


def train_inputs(wildcards):
    inputs = {"train": f"results/hidden/{wildcards.model}/{wildcards.corpus}/train"}
    if METHOD_SPECS[wildcards.method].needs_head:
        inputs["model"] = predicting_model_dir(wildcards.model)
    return inputs


def map_files(model, corpus, method):
    """The map files of a fitted method, one per source layer; none for id."""
    if method == "id":
        return []
    return expand(
        "results/maps/{model}/{corpus}/{method}/from_{source}.safetensors",
        model=model,
        corpus=corpus,
        method=method,
        source=range(num_layers(model)),
    )


def get_final_output():
    targets = []
    for model in MODELS:
        for corpus in CORPORA:
            # the hidden states are a product of their own (and listing them lets a dry run
            # show every stage before the resolve_model checkpoint has run)
            targets += expand(
                "results/hidden/{model}/{corpus}/{split}",
                model=model,
                corpus=corpus,
                split=["train", "validation"],
            )
            targets.append(f"results/metrics/{model}/{corpus}/r2.parquet")
            targets += expand(
                "results/figures/{model}/{corpus}/r2_{method}.{ext}",
                model=model,
                corpus=corpus,
                method=methods_for(model),
                ext=["png", "pdf"],
            )
            targets.append(f"results/metrics/{model}/{corpus}/parameters.parquet")
            if model in PREDICTING:
                targets += [
                    f"results/metrics/{model}/{corpus}/prediction.parquet",
                    f"results/metrics/{model}/{corpus}/examples.md",
                    f"results/figures/{model}/{corpus}/prediction.png",
                    f"results/metrics/{model}/{corpus}/early_exit_savings.parquet",
                    f"results/figures/{model}/{corpus}/early_exit.png",
                ]
            if model in SUBMODULES["models"] and corpus in SUBMODULE_CORPORA:
                targets += [
                    f"results/metrics/{model}/{corpus}/parts_r2.parquet",
                    f"results/figures/{model}/{corpus}/parts_r2.png",
                    f"results/metrics/{model}/{corpus}/submodules.parquet",
                    f"results/figures/{model}/{corpus}/submodules.png",
                ]
    return targets


def corpus_inputs(wildcards):
    spec = config["corpora"][wildcards.corpus]
    if spec["source"] == "leipzig":
        return {"archive": f"data/downloads/{wildcards.corpus}.tar.gz"}
    if spec["source"] == "text_file":
        return {"text": spec["path"]}
    return {}


def r2_inputs(wildcards):
    """Validation states, plus every map file of each fitted method (one per source layer)."""
    inputs = {
        "validation": f"results/hidden/{wildcards.model}/{wildcards.corpus}/validation"
    }
    for method in methods_for(wildcards.model):
        if method != "id":
            inputs[method] = map_files(wildcards.model, wildcards.corpus, method)
    return inputs


def parameter_inputs(wildcards):
    """Each fitted method's maps from layer 0 (they hold its map into the last layer)."""
    inputs = {
        method: map_files(wildcards.model, wildcards.corpus, method)[0]
        for method in methods_for(wildcards.model)
        if method != "id"
    }
    return {"model": model_dir(wildcards.model), **inputs}


def decode_inputs(wildcards):
    return {
        "model": predicting_model_dir(wildcards.model),
        "validation": f"results/hidden/{wildcards.model}/{wildcards.corpus}/validation",
        "maps": map_files(wildcards.model, wildcards.corpus, wildcards.method),
    }


def examples_inputs(wildcards):
    """Like decode_inputs, for every method; checks the configured example layers."""
    problem = layer_problem(wildcards.model, num_layers(wildcards.model), config)
    if problem:
        raise WorkflowError(f"invalid configuration: {problem}")
    inputs = {
        "model": predicting_model_dir(wildcards.model),
        "validation": f"results/hidden/{wildcards.model}/{wildcards.corpus}/validation",
        "sentences": f"results/corpora/{wildcards.corpus}.parquet",
    }
    for method in MAP_METHODS:
        inputs[method] = map_files(wildcards.model, wildcards.corpus, method)
    return inputs


def early_exit_inputs(wildcards):
    """Every method's per-position scores and the validation states; checks min_layer."""
    problem = layer_problem(wildcards.model, num_layers(wildcards.model), config)
    if problem:
        raise WorkflowError(f"invalid configuration: {problem}")
    inputs = {
        "validation": f"results/hidden/{wildcards.model}/{wildcards.corpus}/validation"
    }
    for method in METHODS:
        inputs[method] = (
            f"results/predictions/{wildcards.model}/{wildcards.corpus}/{method}.parquet"
        )
    return inputs
