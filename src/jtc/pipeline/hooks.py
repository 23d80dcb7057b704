"""jtc's run handlers (onstart, onsuccess, onerror) kept when jtc is a module of another
workflow (docs/deploying.md).

Snakemake calls only the handlers of the main Snakefile: a module's `onstart:` block is read
and never run (Snakemake 9's Workflow.onstart sets the handler only when
`workflow.modifier.is_main_snakefile()`). jtc's handlers are its guards (the watchdog mark,
the GPU and experiment checks, the kept outputs put back when a job fails, the end-of-run
notes), so as a module jtc joins them to the main workflow's: `join_main_workflow` chains each
with the handler the including Snakefile has set so far, and with any it sets later (its
`onstart:` blocks are read after or before the `module`/`use rule` statements, in either order).

jtc's handler runs first: an onstart refusal stops the run before the host's handler runs (as
a failed onstart stops the jobs), and at the end both run even if the first raises.
(torch-free: the workflow imports it while it plans.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Handler = Callable[[Any], object]  # handler(log): log, the run's log file
NAMES = ("onstart", "onsuccess", "onerror")
JOINED = "_jtc_joined_handlers"  # the names joined on a workflow, so that joining is done once


def chained(ours: Handler, theirs: Handler, always: bool) -> Handler:
    """A handler that runs `ours` and then `theirs` (with `always`, even if `ours` raised)."""

    def both(log):
        if not always:
            ours(log)
            return theirs(log)
        try:
            ours(log)
        finally:
            theirs(log)

    both.jtc_handler = ours
    both.host_handler = theirs
    return both


def join_main_workflow(workflow, **handlers: Handler) -> list[str]:
    """Have Snakemake call `handlers` ({"onstart": f, "onsuccess": g, "onerror": h}, each
    f(log)) of a module as it calls those of the main Snakefile of `workflow` (the one Workflow
    of a run, shared by its modules), each chained with the main Snakefile's handler of that
    name: the one it has set (or Snakemake's default, which does nothing) and any it sets later
    through `onstart:` and the others. Returns the names joined (none when they were already
    joined, so that one workflow calls them once)."""
    joined = getattr(workflow, JOINED, set())
    names = [n for n in NAMES if n in handlers and n not in joined]
    unknown = set(handlers) - set(NAMES)
    if unknown:
        raise ValueError(f"not a handler of a run: {', '.join(sorted(unknown))}")
    for name in names:
        ours, always = handlers[name], name != "onstart"
        setattr(workflow, f"_{name}", chained(ours, getattr(workflow, f"_{name}"), always))
        register = getattr(workflow, name)  # Snakemake's, which the parsed `onstart:` calls

        def registered(func, name=name, ours=ours, always=always, register=register):
            register(func)
            if workflow.modifier.is_main_snakefile():  # what Snakemake will call: both
                setattr(workflow, f"_{name}", chained(ours, func, always))

        setattr(workflow, name, registered)
    setattr(workflow, JOINED, joined | set(names))
    return names
