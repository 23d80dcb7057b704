"""The report's figures, one module per family of figures (r2, prediction, early_exit,
submodules, pruning, and lens for the API); common.py holds what they share.

Kept empty on purpose: code tracking (jtc.pipeline.tracking) hashes every package
__init__ a job imports, so code here would rerun every plot job."""
