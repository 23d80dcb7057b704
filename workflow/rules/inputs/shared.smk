# The input and params functions that several families of rules share: the code hash of each
# job, the cached model (known once its resolve_model checkpoint has run, checked while planning
# against what the config asks of it), where a job runs it (device_map), the positions a split
# keeps, and the results the families read (states, map files, prediction scores). Each family's
# own functions are in inputs/<family>.smk, included at the top of its rule file.
# Functions only: a file with both rules and functions fails snakemake --lint.
from pathlib import Path

from snakemake.exceptions import WorkflowError

from jtc import paths
from jtc.files.io import CorruptFileError, read_json
from jtc.pipeline.config import split_positions
from jtc.pipeline.draws import split_counts, split_draws, split_problem
from jtc.pipeline.planning import resolved_problem
from jtc.pipeline.tracking import code_hash as _code_hash


def code_hash(rule):
    """Hash of the code a rule's job runs: its script workflow/scripts/<rule>.py and every jtc
    module that script can load (jtc.pipeline.tracking), so that editing them reruns the rule. The
    script is read from the workflow's own tree (workflow_file: on disk, or a remote module's
    cached copy), jtc from the folder it is imported from (SRC, workflow/Snakefile).
    """
    return _code_hash(SRC, workflow_file(f"scripts/{rule}.py"))


def device_map(wildcards):
    return config["models"][wildcards.model].get("device_map")


def positions(wildcards):
    return split_positions(config, wildcards.split)


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


def checked_sentences(corpus, rule):
    """A corpus's sentence table, known once its prepare_corpus checkpoint has run, refused
    (while planning, before any job of `rule` starts) when `rule` draws more sentences from a
    split than the table has, naming the config key that asks for them (jtc.pipeline.draws).
    """
    table = checkpoints.prepare_corpus.get(corpus=corpus).output[0]
    draws = split_draws(config, [rule])
    problem = split_problem(
        corpus, split_counts(table), draws, f"its sentence table {table}"
    )
    if problem:
        raise WorkflowError(f"invalid configuration: {problem}")
    return table


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


def fitted_maps(wildcards):
    """The map file of each fitted method that applies to the model."""
    return {
        method: map_file(wildcards.model, wildcards.corpus, method)
        for method in methods_for(wildcards.model)
        if method != "id"
    }


def scores_of(wildcards, methods):
    """The per-position prediction scores of these methods."""
    return {
        m: paths.SCORES.format(model=wildcards.model, corpus=wildcards.corpus, method=m)
        for m in methods
    }
