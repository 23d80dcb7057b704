"""Data: corpora and sentence tables, hidden-state extraction and the hidden-state format.

Kept empty on purpose: code tracking (jtc.pipeline.tracking) hashes every package
__init__ a job imports, so code here would rerun every job below it."""
