"""The report: figures, HTML pages, worked examples, headline numbers.

Kept empty on purpose: code tracking (jtc.pipeline.tracking) hashes every package
__init__ a job imports, so code here would rerun every job below it."""
