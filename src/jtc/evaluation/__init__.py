"""Evaluation: r², decoding through the head, prediction metrics, early exit, shortlists,
generation.

Kept empty on purpose: code tracking (jtc.pipeline.tracking) hashes every package
__init__ a job imports, so code here would rerun every job below it."""
