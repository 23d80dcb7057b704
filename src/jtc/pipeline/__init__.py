"""How a workflow run is planned, started and kept safe (the Python side of the Snakemake
workflow in workflow/): the config schema and its checks, planning, code tracking, resource
requests, GPUs, locks, kept outputs, the job wrapper, the watchdog, fingerprints and the
end-of-run summary. Read while Snakemake plans and by every job's wrapper; no torch.

Kept empty on purpose: code tracking (jtc.pipeline.tracking) hashes every package
__init__ a job imports, so code here would rerun every job below it."""
