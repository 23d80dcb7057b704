# What the rules' jobs read and are given beyond the config: the input functions (those past
# the resolve_model checkpoint read the model's info.json and check it, while planning), the
# params functions (content fingerprints, the cached model's spec) and the code hash of each job.
from pathlib import Path

from snakemake.exceptions import WorkflowError

from jtc import paths
from jtc.files.io import CorruptFileError, read_json
from jtc.report.headline import headline_sources
from jtc.shortcuts.parts import jump_layers
from jtc.runs.config import split_positions
from jtc.runs.fingerprint import corpus_fingerprint, model_fingerprint
from jtc.runs.planning import resolved_problem
from jtc.runs.tracking import code_hash as _code_hash


def code_hash(rule):
    """Hash of the code a rule's job runs: its script workflow/scripts/<rule>.py and every jtc
    module that script can load (jtc.runs.tracking), so that editing them reruns the rule.
    """
    return _code_hash(SRC, Path(workflow.basedir, "scripts", f"{rule}.py"))


def cached_spec(wildcards):
    """What the model cache is made from: a model's entry without device_map (where the
    model runs, not what is cached: the jobs that run the model get it as a param)."""
    spec = config["models"][wildcards.model]
    return {key: value for key, value in spec.items() if key != "device_map"}


def device_map(wildcards):
    return config["models"][wildcards.model].get("device_map")


def positions(wildcards):
    return split_positions(config, wildcards.split)


def corpus_content(wildcards):
    """The content fingerprint of a corpus's text file or downloaded archive (None for
    the packaged corpora): a file replaced with an older time stamp reruns the job."""
    return corpus_fingerprint(wildcards.corpus, config["corpora"][wildcards.corpus])


def model_content(wildcards):
    """The content fingerprint of a local or packaged model folder or GGUF file (None for a
    hub id): weights replaced with an older time stamp still rerun resolve_model."""
    return model_fingerprint(config["models"][wildcards.model])


def model_dir(model):
    return checkpoints.resolve_model.get(model=model).output[0]


def model_info(model):
    """A model's info.json, known once its resolve_model checkpoint has run."""
    folder = model_dir(model)
    try:
        return read_json(Path(folder, "info.json"))
    except CorruptFileError as err:
        raise WorkflowError(
            f"{err}; delete the folder {folder} and rerun to cache the model again"
        ) from None


def num_layers(model):
    return model_info(model)["num_layers"]


def checked_model_dir(model, predict=False, parts=False, prune=False):
    """The cached model, refused (while planning) when it cannot do what the config asks of
    it: predict (a decoder head, the configured layers), sub-modules (block parts, jump
    layers), depth pruning (a causal LM, the configured lengths)."""
    problem = resolved_problem(
        model, model_info(model), config, predict=predict, parts=parts, prune=prune
    )
    if problem:
        raise WorkflowError(problem)
    return model_dir(model)


def map_file(model, corpus, method):
    """A fitted method's map file (every source layer); none for id."""
    if method == "id":
        return []
    return paths.MAP.format(model=model, corpus=corpus, method=method)


def hidden(wildcards, split):
    """The states folder of a split, for the job's model and corpus."""
    return paths.HIDDEN.format(
        model=wildcards.model, corpus=wildcards.corpus, split=split
    )


def corpus_inputs(wildcards):
    spec = config["corpora"][wildcards.corpus]
    if spec["source"] == "leipzig":
        return {"archive": paths.DOWNLOAD.format(corpus=wildcards.corpus)}
    if spec["source"] == "text_file":
        return {"text": spec["path"]}
    return {}


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


def fitted_maps(wildcards):
    """The map file of each fitted method that applies to the model."""
    return {
        method: map_file(wildcards.model, wildcards.corpus, method)
        for method in methods_for(wildcards.model)
        if method != "id"
    }


def r2_inputs(wildcards):
    """Validation states, plus the map file of each fitted method."""
    return {"validation": hidden(wildcards, "validation"), **fitted_maps(wildcards)}


def parameter_inputs(wildcards):
    """The cached model's shape, and the map file of each fitted method."""
    return {"model": model_dir(wildcards.model), **fitted_maps(wildcards)}


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


def scores_of(wildcards, methods):
    """The per-position prediction scores of these methods."""
    return {
        m: paths.SCORES.format(model=wildcards.model, corpus=wildcards.corpus, method=m)
        for m in methods
    }


def early_exit_inputs(wildcards):
    """Every method's per-position scores and the validation states; checks min_layer."""
    return {
        "model": checked_model_dir(wildcards.model, predict=True),
        "parameters": paths.metric("parameters.parquet").format(**wildcards),
        "validation": hidden(wildcards, "validation"),
        **scores_of(wildcards, METHODS),
    }


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


def headline_pairs():
    """Every (model, corpus, whether the model is decoded, whether it is pruned there) of the
    run."""
    return [
        [m, c, m in PREDICTING, EXPERIMENT.prunes(m, c)]
        for m in MODELS
        for c in CORPORA
    ]


def headline_inputs(wildcards):
    """Every table the headline numbers read (jtc.report.headline.headline_sources)."""
    inputs = {}
    for model, corpus, *flags in headline_pairs():
        for name, path in headline_sources(model, corpus, *flags).items():
            inputs[f"{name}_{model}_{corpus}"] = path
    return inputs


def landing_template():
    """The text of the report's landing page (workflow/report/workflow.rst): a param, so that
    editing it remakes the landing page wherever the workflow is checked out."""
    return Path(workflow.basedir, "report", "workflow.rst").read_text(encoding="utf-8")
