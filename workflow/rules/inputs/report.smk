# The input and params functions of the rules in report.smk, which includes this file at its
# top. Those that several families share are in shared.smk.
from pathlib import Path

from jtc.report.headline import headline_sources


def headline_pairs():
    """Every (model, corpus, whether the model is decoded, whether it is pruned there) of the
    run."""
    return [
        [m, c, m in PREDICTING, EXPERIMENT.prunes(m, c)]
        for m in MODELS
        for c in CORPORA
    ]


def headline_inputs(wildcards):
    """Every table the headline numbers read (jtc.report.headline.headline_sources)."""
    inputs = {}
    for model, corpus, *flags in headline_pairs():
        for name, path in headline_sources(model, corpus, *flags).items():
            inputs[f"{name}_{model}_{corpus}"] = path
    return inputs


def landing_template():
    """The text of the report's landing page (workflow/report/workflow.rst): a param, so that
    editing it remakes the landing page wherever the workflow is checked out."""
    return Path(workflow_file("report/workflow.rst")).read_text(encoding="utf-8")
