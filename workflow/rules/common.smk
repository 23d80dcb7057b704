import hashlib
import json
import re
from pathlib import Path

from snakemake.exceptions import WorkflowError

from jtc.config import ConfigError, validate_config

try:
    _checked = validate_config(config)
except ConfigError as err:
    raise WorkflowError(f"invalid configuration: {err}") from None
config.clear()
config.update(_checked)

SRC = Path(workflow.basedir) / "src" / "jtc"
MODELS = list(config["models"])
CORPORA = list(config["corpora"])
MAP_METHODS = [m for m in config["methods"] if m != "id"]


def _alternatives(names):
    return "|".join(re.escape(n) for n in names)


wildcard_constraints:
    model=_alternatives(MODELS),
    corpus=_alternatives(CORPORA),
    split="train|validation",
    source=r"\d+",
    method=_alternatives(config["methods"]),


def code_hash(*modules):
    """Hash of the package modules a stage runs, so that editing them reruns the stage."""
    digest = hashlib.sha256()
    for module in ("io", "logs", "pipeline", *modules):
        digest.update((SRC / f"{module}.py").read_bytes())
    return digest.hexdigest()[:16]


def num_layers(model):
    """Layer count of a model, known once its resolve_model checkpoint has run."""
    model_dir = checkpoints.resolve_model.get(model=model).output[0]
    return json.loads(Path(model_dir, "info.json").read_text())["num_layers"]


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
                method=config["methods"],
                ext=["png", "pdf"],
            )
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
    for method in MAP_METHODS:
        inputs[method] = expand(
            "results/maps/{model}/{corpus}/{method}/from_{source}.safetensors",
            model=wildcards.model,
            corpus=wildcards.corpus,
            method=method,
            source=range(num_layers(wildcards.model)),
        )
    return inputs
