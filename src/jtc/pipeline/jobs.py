"""What every workflow job does around its stage: its log (jtc.logs), an end of its own when the
Snakemake process that started it dies (jtc.pipeline.watchdog), its inputs checked to be the outputs
they are read as and its outputs stamped (jtc.files.stamps)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from jtc.files import stamps
from jtc.logs import job_log
from jtc.pipeline.watchdog import end_with_parent_run


@contextlib.contextmanager
def job(smk: Any) -> Iterator[None]:
    """Run a workflow script's stage: `with job(snakemake): stage(...)`."""
    with job_log(smk.log[0] if smk.log else None):
        end_with_parent_run()  # its message lands in the job's log
        stamps.begin(
            smk.rule, dict(smk.wildcards.items()), dict(smk.params.items()), list(smk.output)
        )
        try:
            stamps.check_inputs([str(path) for path in smk.input])
            yield
            stamps.record_outputs([str(path) for path in smk.output])
        finally:
            stamps.end()
