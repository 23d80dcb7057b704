"""Files: atomic writes, JSON and Parquet tables with column digests, and the stamp every output
carries.

Kept empty on purpose: code tracking (jtc.pipeline.tracking) hashes every package
__init__ a job imports, so code here would rerun every job below it."""
