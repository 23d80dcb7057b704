"""The workflow's own machinery: config, planning checks, code tracking, resources, GPUs, locks,
kept outputs, job wrapper, end-of-run summary.

Kept empty on purpose: code tracking (jtc.workflow.tracking) hashes every package
__init__ a job imports, so code here would rerun every job below it."""
