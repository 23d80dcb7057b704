"""Shortcuts: the methods, closed-form and trained fits, map files, sub-module parts and
replacement.

Kept empty on purpose: code tracking (jtc.pipeline.tracking) hashes every package
__init__ a job imports, so code here would rerun every job below it."""
