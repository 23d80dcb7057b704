"""Models: where weights come from, the cache, architecture adapters and discovery, the decoder
head, forward hooks.

Kept empty on purpose: code tracking (jtc.pipeline.tracking) hashes every package
__init__ a job imports, so code here would rerun every job below it."""
