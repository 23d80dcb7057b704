# The targets of `all` (every output of the experiment, jtc.pipeline.planning.Experiment), each
# existing one checked while planning, the jobs of `all` still to run (the disk estimate,
# jtc.pipeline.disk), and the report's landing page.
import itertools
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from jtc import paths
from jtc.pipeline.disk import Job
from jtc.pipeline.planning import damaged_problem, leftovers_note


def _outputs_of(rule, **wildcards):
    """Every output file of a rule's job, for these wildcards."""
    return expand(list(getattr(rules, rule).output), **wildcards)


def get_final_output():
    """Everything the experiment makes, intermediates included (the cached models, sentence
    tables, states, maps, per-position scores): an output deleted by hand is made again by the
    next run, with what depends on it, even where what follows it is up to date."""
    return EXPERIMENT.targets(_outputs_of)


def missing_jobs():
    """The jobs of `all` with an output missing (jtc.pipeline.disk.Job: rule, wildcards,
    outputs), as known while this file is read: the targets' jobs (EXPERIMENT.targets, its
    outputs_of recorded), the cached models and the sentence tables."""
    jobs = [("resolve_model", {"model": m}) for m in MODELS]
    jobs += [("prepare_corpus", {"corpus": c}) for c in CORPORA]

    def record(rule, **wildcards):
        lists = {k: v if isinstance(v, list) else [v] for k, v in wildcards.items()}
        for values in itertools.product(*lists.values()):
            jobs.append((rule, dict(zip(lists, values))))
        return _outputs_of(rule, **wildcards)

    EXPERIMENT.targets(record)
    missing = []
    for rule, wildcards in jobs:
        outputs = _outputs_of(rule, **wildcards)
        if not all(os.path.exists(o) for o in outputs):
            missing.append(Job(rule, wildcards, len(outputs)))
    return unique_jobs(missing)


def unique_jobs(jobs):
    """Each job once (by rule and wildcards)."""
    return list(
        {(j.rule, tuple(sorted(j.wildcards.items()))): j for j in jobs}.values()
    )


def pruned_folders():
    """The pruned checkpoints of the experiment (`snakemake pruned`; not targets of `all`)."""
    return [
        paths.PRUNED.format(model=m, corpus=c)
        for m in MODELS
        for c in CORPORA
        if EXPERIMENT.prunes(m, c)
    ]


def other_folders():
    """What the experiment makes outside `all` (`snakemake pruned`, `snakemake benchmarks`):
    the pruned checkpoints and lm-eval's task files, checked and not named as left by another
    config where they exist."""
    pruned = pruned_folders()
    return pruned + ([paths.BENCHMARK_TASKS] if pruned else [])


def checked_targets():
    """get_final_output, each existing output checked first to be the one it is (not a file
    copied over it, damaged or edited since its job wrote it), so that a run, even one with
    nothing else to do, names it and the command that rebuilds it; and the outputs of another
    config lying beside them named. What the experiment makes outside `all` is checked too,
    whatever the target (other_folders)."""
    targets = get_final_output()
    if workflow.is_main_process:
        problem = damaged_problem(targets + other_folders())
        if problem:
            raise WorkflowError(problem)
        note = leftovers_note(targets + other_folders())
        if note:
            print(note, file=sys.stderr)
    return targets


def dry_run_disk(wildcards):
    """No input: in a dry run of `all`, which runs no onstart, the disk its jobs would
    write checked (lifecycle.smk's check_disk), from what is known as the DAG is built.
    """
    if workflow.is_main_process and getattr(workflow.output_settings, "dryrun", False):
        check_disk(missing_jobs(), shown=True)
    return []


def report_text():
    """The report's landing page: the run's own, with its headline numbers, once the run has
    made it (snakemake --report plans after the run), else the template alone."""
    landing = Path(paths.LANDING)
    return str(landing.resolve()) if landing.is_file() else "report/workflow.rst"
