"""Logging for workflow jobs: everything a job prints goes to its Snakemake log file."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def job_log(path: str | None) -> Iterator[None]:
    """Send logging records and stderr (progress bars, warnings) to `path` for the block."""
    if not path:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        yield
        return
    with open(path, "a", buffering=1) as handle:
        handler = logging.StreamHandler(handle)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        old_stderr, sys.stderr = sys.stderr, handle
        try:
            yield
            loaded = sorted(m for m in sys.modules if m == "jtc" or m.startswith("jtc."))
            logging.getLogger("jtc").info("jtc modules loaded: %s", " ".join(loaded))
        except BaseException:
            logging.getLogger("jtc").exception("job failed")
            raise
        finally:
            sys.stderr = old_stderr
            root.removeHandler(handler)
