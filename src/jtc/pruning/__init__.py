"""Depth pruning with linear shortcuts: which spans of blocks there are, the calibration sums
and the maps fitted from them, the selection rules, the runs with a span replaced, their tables,
and the pruned model written as a standard checkpoint.

Kept empty on purpose: code tracking (jtc.pipeline.tracking) hashes every package
__init__ a job imports, so code here would rerun every job below it."""
