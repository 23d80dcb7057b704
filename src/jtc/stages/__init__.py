"""The workflow's stages: one module per rule file (workflow/rules/<family>.smk), one function per
rule, named after it. A stage reads its inputs, calls the library and writes its outputs
atomically; workflow/scripts/<rule>.py only unpacks `snakemake.*` and calls it.

Library modules are imported inside the stage functions that use them (never at the top of a
stage module): each rule's code hash covers exactly the modules its function can load (see
jtc.pipeline.tracking), and the many small torch-free jobs start without importing torch.
"""
