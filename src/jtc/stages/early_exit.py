"""Stages of workflow/rules/early_exit.smk: confidence-thresholded early exit with every
method, and its figure."""

from __future__ import annotations


def early_exit(
    score_files: dict[str, str],
    val_dir: str,
    sweep_out: str,
    savings_out: str,
    *,
    model: str,
    corpus: str,
    lambdas: list[float],
    tau: float,
    lambda_weight: float,
    decay_weight: float,
    min_layer: int,
    targets: list[float],
) -> None:
    """The λ sweep and fixed exits of every method, and the layers saved at target accuracies,
    from the per-position scores of decode_predictions."""
    import numpy as np

    from .. import early_exit as ee
    from ..io import read_positions, read_table, write_table
    from ..logs import ready

    ready()
    positions, info = read_positions(val_dir)
    sweep, saved = ee.exit_tables(
        {method: read_table(path) for method, path in score_files.items()},
        positions,
        info["num_layers"],
        ee.ExitRule(tau, lambda_weight, decay_weight, min_layer),
        np.asarray(lambdas or ee.DEFAULT_LAMBDAS, dtype=np.float64),
        targets,
        model=model,
        corpus=corpus,
    )
    write_table(sweep, sweep_out, csv=True)
    write_table(saved, savings_out, csv=True)


def plot_early_exit(table: str, png: str, pdf: str, *, model: str, corpus: str) -> None:
    """Accuracy against mean layers run, per method, for the λ sweep and the fixed exits."""
    from ..io import read_table
    from ..logs import ready
    from ..plots import early_exit_figure

    ready()
    early_exit_figure(read_table(table), f"{model} on {corpus}", png, pdf)
