# What happens around the jobs of a run: stale locks cleared as the Snakefile is read; as the
# jobs start (onstart) the watchdog mark, the machine's GPU checked, outputs made with other
# settings refused or named, results/ kept; then dropped (onsuccess) or put back (onerror). As a
# module, jtc's handlers join those of the Snakefile that uses it (jtc.pipeline.hooks).
import atexit
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from jtc import paths
from jtc.pipeline.disk import Job, disk_check, planned_writes
from jtc.pipeline.keep import NO_LINKS_NOTE, Keeper, drop_stale
from jtc.pipeline.draws import sizes_problem
from jtc.pipeline.hooks import join_main_workflow
from jtc.pipeline.locks import run_start
from jtc.pipeline.planning import (
    gpu_problem,
    planned_jobs,
    replaced_note,
    stale_problem,
)
from jtc.pipeline.summary import run_summary
from jtc.pipeline.watchdog import mark_run

# a run killed with SIGKILL leaves its locks; with no other Snakemake working here, drop them
# so that a plain rerun resumes (workflow/profiles/default adds --rerun-incomplete for its last
# jobs); locks kept because processes still work here are named, with how to stop them
# (jtc.pipeline.locks.run_start); one run at a time in a folder, even two started at once: the
# second stops here with jtc's message, before Snakemake's advice to --unlock
if workflow.is_main_process:
    _notes, _refused = run_start(
        dry_run=getattr(workflow.output_settings, "dryrun", False)
    )
    for _note in _notes:
        print(_note, file=sys.stderr)
    if _refused:
        raise WorkflowError(_refused)

# A failed job costs nothing already computed (jtc.pipeline.keep): every output under results/ gets a
# hard link before the jobs start; if the run fails, the outputs that failed jobs had deleted
# are put back with Snakemake's record of them; a successful run drops the links.
KEEPER = Keeper.of_snakemake(
    paths.RESULTS,
    Path(".snakemake", "jtc-kept", str(os.getpid())),  # this run's own
    lambda: workflow.persistence,
)


def _restore_kept():
    """Put back what failed jobs deleted (onerror, or at exit when the run stopped without
    reaching onerror or onsuccess, e.g. an error raised while planning after a checkpoint).
    """
    note = KEEPER.restore_note()
    if note:
        print(note, file=sys.stderr)


def _check_experiment():
    """Before any job starts: refuse outputs that the run would read as they are but that were
    made with other settings (or are other outputs), more sentences than a prepared corpus
    has (jtc.pipeline.draws), and more than the disk holds (check_disk); say which outputs it
    replaces as the config changed.
    """
    jobs = planned_jobs(workflow.dag)
    problem = stale_problem(jobs) or sizes_problem(jobs, config)
    if problem:
        raise WorkflowError(problem)
    note = replaced_note(jobs)
    if note:
        print(note, file=sys.stderr)
    planned = [Job(j.rule, j.wildcards, len(j.outputs)) for j in jobs if j.runs]
    if "all" in {job.rule.name for job in workflow.dag.targetjobs}:
        # the jobs after a checkpoint are planned once it is made: those of `all` counted
        # from its targets (missing_jobs, targets.smk)
        planned = unique_jobs(planned + missing_jobs())
    check_disk(planned)


def check_disk(jobs, shown=False):
    """Refuse a run whose jobs write more than the results folder's disk has free, naming
    the largest outputs and the keys that shrink them (only said, with `disk_check: warn`);
    else say what it writes (jtc.pipeline.disk). `shown`: the refusal printed first, for a caller whose error
    Snakemake shows without its message (an input function's)."""
    problem, note = disk_check(
        planned_writes(jobs, config), paths.RESULTS, config=config
    )
    if problem and config["disk_check"] == "warn":
        print(f"{problem}\n(disk_check: warn, so the run goes on)", file=sys.stderr)
        return
    if problem and shown:
        print(problem, file=sys.stderr)
        raise WorkflowError("the run does not fit on the disk (the estimate above)")
    if problem:
        raise WorkflowError(problem)
    print(note, file=sys.stderr)


def jtc_onstart(log=None):
    """As the jobs start: the watchdog mark, the GPU and experiment checks, results/ kept."""
    if workflow.local_exec:
        mark_run()  # the jobs end themselves if this process is killed (jtc.pipeline.watchdog)
    # what this machine cannot run (a device_map without a GPU, bfloat16 on a GPU without it),
    # refused before any job runs; a cluster's jobs run elsewhere and check it there
    problem = gpu_problem(config["models"], _local_gpu)  # resources.smk
    if problem:
        raise WorkflowError(f"invalid configuration for this machine: {problem}")
    _check_experiment()
    drop_stale(KEEPER.folder.parent, KEEPER.folder)
    atexit.register(_restore_kept)
    if KEEPER.save() is None:
        print(NO_LINKS_NOTE, file=sys.stderr)


def jtc_onsuccess(log=None):
    """A run that succeeded: the kept links dropped, the end-of-run notes."""
    KEEPER.drop()
    print(run_summary(paths.RESULTS, MODELS, CORPORA), file=sys.stderr)


def jtc_onerror(log=None):
    """A run that failed: what its failed jobs deleted put back."""
    _restore_kept()


onstart:
    jtc_onstart(log)


onsuccess:
    jtc_onsuccess(log)


onerror:
    jtc_onerror(log)


# Snakemake runs the handlers of the main Snakefile alone: jtc used as a module (docs/deploying.md)
# has them run with those of the Snakefile that uses it, set before or after its `use rule`
if not workflow.modifier.is_main_snakefile():
    join_main_workflow(
        workflow, onstart=jtc_onstart, onsuccess=jtc_onsuccess, onerror=jtc_onerror
    )
