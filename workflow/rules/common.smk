# What the other .smk files share: the checked config, the targets of `all`, the input functions
# (which read a resolved model's info.json), resources, and the code hash of each job.
import atexit
import dataclasses
import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from jtc import paths
from jtc.workflow.config import ConfigError, command_line_config
from jtc.workflow.fingerprint import corpus_fingerprint, model_fingerprint
from jtc.workflow.gpus import local_gpu
from jtc.files.io import CorruptFileError, read_json
from jtc.workflow.keep import Keeper, drop_stale
from jtc.workflow.locks import clear_stale_locks, held_lock_message
from jtc.shortcuts.methods import METHODS as METHOD_SPECS, applicable
from jtc.shortcuts.parts import VARIANTS, jump_layers
from jtc.workflow.planning import checked_config, gpu_problem, resolved_problem
from jtc.workflow.resources import Shape, gpu_memory_percent, memory_mb, runtime_minutes
from jtc.stages.report import headline_sources
from jtc.files.stamps import (
    PlannedJob,
    damaged_outputs,
    leftovers,
    listing,
    replaced_outputs,
    stale_outputs,
)
from jtc.workflow.summary import run_summary
from jtc.workflow.tracking import code_hash as _code_hash
from jtc.workflow.watchdog import mark_run

try:
    # --config key=value alone sets keys of config/config.yaml (jtc.workflow.config.command_line_config)
    _in_force = command_line_config(
        config,
        DEFAULT_CONFIG,
        workflow.config_settings.overwrite_config,
        bool(workflow.overwrite_configfiles),
    )
    _checked = checked_config(_in_force, workflow.configfiles)
except ConfigError as err:
    raise WorkflowError(f"invalid configuration: {err}") from None
config.clear()
config.update(_checked)

# a run killed with SIGKILL leaves its locks; with no other Snakemake working here, drop them
# so that a plain rerun resumes (workflow/profiles/default adds --rerun-incomplete for its last
# jobs)
if workflow.is_main_process:
    for _lock in clear_stale_locks():
        print(
            f"jtc: removed a stale lock left by an interrupted run: {_lock}",
            file=sys.stderr,
        )
    # locks kept because processes still work here (a run, or jobs of a killed one): name them
    # and how to stop them, before Snakemake's own advice to --unlock (unsafe while they run)
    _held = held_lock_message()
    if _held:
        print(_held, file=sys.stderr)

# A failed job costs nothing already computed (jtc.workflow.keep): every output under results/ gets a
# hard link before the jobs start; if the run fails, the outputs that failed jobs had deleted
# are put back with Snakemake's record of them; a successful run drops the links.
KEEPER = Keeper(
    paths.RESULTS,
    Path(".snakemake", "jtc-kept", str(os.getpid())),  # this run's own
    lambda key: workflow.persistence._read_record(key),
    lambda key, record: workflow.persistence._write_record(key, record),
    lambda key: workflow.persistence._delete_record(key),
    lambda key: bool(workflow.persistence._filter_incomplete_keys([key])),
)


def _restore_kept():
    """Put back what failed jobs deleted (onerror, or at exit when the run stopped without
    reaching onerror or onsuccess, e.g. an error raised while planning after a checkpoint).
    """
    restored = KEEPER.restore()
    if restored:
        print(
            f"jtc: put back {len(restored)} outputs that failed jobs had deleted "
            f"(e.g. {restored[0]}); they and their records are as before this run",
            file=sys.stderr,
        )


def _planned_jobs():
    """The run's jobs as jtc.files.stamps sees them (Snakemake's DAG, known once the run starts)."""
    dag = workflow.dag
    return [
        PlannedJob(
            job.rule.name,
            dict(job.wildcards_dict),
            dict(job.params.items()),
            [str(f) for f in job.output],
            dag.needrun(job),
        )
        for job in dag.jobs
        if job.rule.name != "all"
    ]


def _check_experiment():
    """Before any job starts: refuse outputs that the run would read as they are but that were
    made with other settings (or are other outputs); say which outputs it replaces because
    the config changed."""
    jobs = _planned_jobs()
    stale = stale_outputs(jobs)
    if stale:
        raise WorkflowError(
            f"{len(stale)} outputs under {paths.RESULTS}/ are not what this run would use:\n"
            + "\n".join(stale)
        )
    replaced = replaced_outputs(jobs)
    if replaced:
        print(
            f"jtc: this run replaces {len(replaced)} outputs made with other settings than "
            f"this config's (and remakes what depends on them): {listing(replaced)}",
            file=sys.stderr,
        )


onstart:
    if workflow.local_exec:
        mark_run()  # the jobs end themselves if this process is killed (jtc.workflow.watchdog)
    # what this machine cannot run (a device_map without a GPU, bfloat16 on a GPU without it),
    # refused before any job runs; a cluster's jobs run elsewhere and check it there
    _problem = gpu_problem(config["models"], _local_gpu)
    if _problem:
        raise WorkflowError(f"invalid configuration for this machine: {_problem}")
    _check_experiment()
    drop_stale(KEEPER.folder.parent, KEEPER.folder)
    atexit.register(_restore_kept)
    if KEEPER.save() is None:
        print(
            "jtc: could not hard-link results/ into .snakemake/ (another file system?): "
            "outputs deleted by a failing job will not be put back",
            file=sys.stderr,
        )


onsuccess:
    KEEPER.drop()
    print(run_summary(paths.RESULTS, MODELS, CORPORA), file=sys.stderr)


onerror:
    _restore_kept()


MODELS = list(config["models"])
CORPORA = list(config["corpora"])
METHODS = list(config["methods"])
MAP_METHODS = [m for m in METHODS if m != "id"]
# fitted from the training states alone, one fit_map job per (model, corpus) for all of them;
# trained through the model's decoder head, one train_map job per (model, corpus, method)
STATE_METHODS = [m for m in MAP_METHODS if not METHOD_SPECS[m].needs_head]
HEAD_METHODS = [m for m in MAP_METHODS if METHOD_SPECS[m].needs_head]
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
    method=_alternatives(config["methods"]),


def code_hash(rule):
    """Hash of the code a rule's job runs: its script workflow/scripts/<rule>.py and every jtc
    module that script can load (jtc.workflow.tracking), so that editing them reruns the rule."""
    return _code_hash(SRC, Path(workflow.basedir, "scripts", f"{rule}.py"))


def _shape(wildcards, split):
    """The model's shape once it is cached (a large default before), and the sentences read."""
    split = getattr(wildcards, "split", split)
    return Shape.of(
        paths.MODEL.format(model=wildcards.model),
        config["sizes"][split],
        config["max_tokens"],
    )


def _epochs(wildcards):
    """Epochs of a train_map job's method, or those of every trained method of a fit_map job
    (training.<method> is always filled in); at least 1."""
    method = getattr(wildcards, "method", None)
    methods = [method] if method else STATE_METHODS
    epochs = [config["training"].get(m, {}).get("max_epochs", 0) for m in methods]
    return max(1, sum(epochs))


def _stage_shape(stage, wildcards, split):
    """_shape, and for replace_parts its sentences, jump layers and runs."""
    shape = _shape(wildcards, split)
    if stage != "replace_parts":
        return shape
    # the depth from the shape (its default before the model is cached): a resource function
    # must not wait for the resolve_model checkpoint
    configured, stride = SUBMODULES["jump_layers"], SUBMODULES["jump_stride"]
    jumps = len(jump_layers(configured, stride, shape.layers))
    return dataclasses.replace(
        shape,
        rows=min(shape.rows, SUBMODULES["sentences"] or shape.rows),
        jumps=jumps,
        runs=jumps * len(SUBMODULES["variants"]),
    )


def mem_mb(stage, split="train"):
    """A job's memory request: grows with the model, the sentences and the attempt."""
    return lambda wildcards, attempt: memory_mb(
        stage, _stage_shape(stage, wildcards, split), attempt
    )


def runtime(stage, split="train"):
    """A job's wall-time request (minutes), likewise."""
    return lambda wildcards, attempt: runtime_minutes(
        stage, _stage_shape(stage, wildcards, split), attempt, _epochs(wildcards)
    )


_LOCAL_GPU = {}


def _local_gpu():
    """The GPU this machine's jobs run on (nvidia-smi, asked once per run), or None: no GPU,
    or jobs that run elsewhere (a cluster's nodes each have their own). Asked only once the
    executor is known, i.e. while the jobs are planned and run, never while this file is read.
    """
    if workflow.executor_plugin is None or not workflow.local_exec:
        return None
    if "gpu" not in _LOCAL_GPU:
        _LOCAL_GPU["gpu"] = local_gpu()
    return _LOCAL_GPU["gpu"]


def _local_gpu_mb():
    gpu = _local_gpu()
    return gpu.memory_mb if gpu else None


def gpu_share(stage, split="train"):
    """A GPU job's share (percent) of the local GPU's memory, the `gpu_memory_percent` resource:
    jobs run side by side on one GPU only while their shares add up to at most the limit that
    workflow/profiles/default sets (100). 0 without a GPU."""
    return lambda wildcards, attempt: gpu_memory_percent(
        stage, _stage_shape(stage, wildcards, split), _local_gpu_mb(), attempt
    )


def cached_spec(wildcards):
    """What the model cache is made from: a model's entry without device_map (where the
    model runs, not what is cached: the jobs that run the model get it as a param)."""
    spec = config["models"][wildcards.model]
    return {key: value for key, value in spec.items() if key != "device_map"}


def device_map(wildcards):
    return config["models"][wildcards.model].get("device_map")


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


def checked_model_dir(model, predict=False, parts=False):
    """The cached model, refused (while planning) when it cannot do what the config asks of
    it: predict (a decoder head, the configured layers), sub-modules (block parts, jump
    layers)."""
    problem = resolved_problem(
        model, model_info(model), config, predict=predict, parts=parts
    )
    if problem:
        raise WorkflowError(problem)
    return model_dir(model)


def methods_for(model):
    """The configured methods that apply to a model (the tuned lens needs a decoder head)."""
    return [m for m in METHODS if applicable(m, config["models"][model]["predict"])]


def map_file(model, corpus, method):
    """A fitted method's map file (every source layer); none for id."""
    if method == "id":
        return []
    return paths.MAP.format(model=model, corpus=corpus, method=method)


def _outputs_of(rule, **wildcards):
    """Every output file of a rule's job, for these wildcards."""
    return expand(list(getattr(rules, rule).output), **wildcards)


def get_final_output():
    """Everything the experiment makes, intermediates included (the cached models, sentence
    tables, states, maps, per-position scores): an output deleted by hand is made again by the
    next run, with what depends on it, even where what follows it is up to date."""
    targets = _outputs_of("headline_table")
    targets += [paths.MODEL.format(model=m) for m in MODELS]
    targets += [paths.CORPUS.format(corpus=c) for c in CORPORA]
    for model in MODELS:
        for corpus in CORPORA:
            done = dict(model=model, corpus=corpus)
            targets += _outputs_of(
                "extract_hidden", **done, split=["train", "validation"]
            )
            names = ["r2_table", "plot_r2", "parameter_table"]
            if STATE_METHODS:
                names.append("fit_map")
            for method in HEAD_METHODS:
                if method in methods_for(model):
                    targets += _outputs_of("train_map", **done, method=method)
            if model in PREDICTING:
                names += ["decode_predictions", "prediction_table", "plot_prediction"]
                names += ["prediction_examples", "early_exit", "plot_early_exit"]
                if config["early_exit"]["shortlist_rank"]:
                    names.append("fit_shortlist")
            if model in SUBMODULES["models"] and corpus in SUBMODULE_CORPORA:
                targets += _outputs_of(
                    "record_parts", **done, split=["train", "validation"]
                )
                names += ["fit_parts", "part_r2_table", "plot_part_r2", "replace_parts"]
                names += ["submodule_table", "plot_submodules"]
            for name in names:
                targets += _outputs_of(name, **done)
    return targets


def checked_targets():
    """get_final_output, each existing output checked first to be the one it is (not a file
    copied over it, damaged or edited since its job wrote it), so that a run, even one with
    nothing else to do, names it and the command that rebuilds it; and the outputs of another
    config lying beside them named."""
    targets = get_final_output()
    if workflow.is_main_process:
        problems = damaged_outputs(targets)
        if problems:
            raise WorkflowError(
                f"{len(problems)} outputs under {paths.RESULTS}/ are not what they should be:\n"
                + "\n".join(problems)
            )
        others = leftovers(paths.RESULTS, targets)
        if others:
            print(
                f"jtc: {len(others)} outputs under {paths.RESULTS}/ are not part of this "
                f"experiment (left by a run with another config; nothing of this run reads "
                f"them, no table or figure combines them): {listing(others)}",
                file=sys.stderr,
            )
    return targets


def headline_pairs():
    """Every (model, corpus, whether the model is decoded) of the run."""
    return [[m, c, m in PREDICTING] for m in MODELS for c in CORPORA]


def headline_inputs(wildcards):
    """Every table the headline numbers read."""
    inputs = {}
    for model, corpus, predicts in headline_pairs():
        for name, path in headline_sources(model, corpus, predicts).items():
            inputs[f"{name}_{model}_{corpus}"] = path
    return inputs


def landing_template():
    """The text of the report's landing page (workflow/report/workflow.rst): a param, so that
    editing it remakes the landing page wherever the workflow is checked out."""
    return Path(workflow.basedir, "report", "workflow.rst").read_text(encoding="utf-8")


def report_text():
    """The report's landing page: the run's own, with its headline numbers, once the run has
    made it (snakemake --report plans after the run), else the template alone."""
    landing = Path(paths.LANDING)
    return str(landing.resolve()) if landing.is_file() else "report/workflow.rst"


def hidden(wildcards, split):
    """The states folder of a split, for the job's model and corpus."""
    return paths.HIDDEN.format(
        model=wildcards.model, corpus=wildcards.corpus, split=split
    )


def corpus_content(wildcards):
    """The content fingerprint of a corpus's text file or downloaded archive (None for
    the packaged corpora): a file replaced with an older time stamp reruns the job."""
    return corpus_fingerprint(wildcards.corpus, config["corpora"][wildcards.corpus])


def model_content(wildcards):
    """The content fingerprint of a local or packaged model folder or GGUF file (None for a
    hub id): weights replaced with an older time stamp still rerun resolve_model."""
    return model_fingerprint(config["models"][wildcards.model])


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
