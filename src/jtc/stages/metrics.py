"""Stages of workflow/rules/metrics.smk: r² of every layer pair, its heatmaps, the parameter
counts of every method."""

from __future__ import annotations


def r2_table(
    val_dir: str,
    maps: dict[str, str | None],
    scored: dict[str, str],
    out: str,
    *,
    model: str,
    corpus: str,
    threads: int,
) -> None:
    """r² of every method on every pair l < l' of the validation states (`maps`: per method
    its map file, None for id; `scored`: per closed-form method the r² its fit_map job
    computed as it solved the maps). On the GPU when the job has one."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from jtc.data.states import LayerStates
    from jtc.devices import linalg_device
    from jtc.evaluation.r2 import layer_r2_table
    from jtc.files.io import read_tables
    from jtc.logs import ready
    from jtc.report.pages import write_table_with_page

    ready()
    tables = read_tables(scored)
    states = LayerStates(val_dir, np.float64)[:]  # every layer read once, all of them held
    with threadpool_limits(threads):
        table = layer_r2_table(
            states, maps, model=model, corpus=corpus, device=linalg_device(), scored=tables
        )
    write_table_with_page(table, out)


def plot_r2(table: str, png: str, pdf: str, *, model: str, corpus: str) -> None:
    """The r² heatmaps of every method in the table (source layer × target layer), side by
    side."""
    from jtc.evaluation.r2 import table_methods
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.report.figures.r2 import r2_heatmaps

    ready()
    r2 = read_table(table)
    r2_heatmaps(r2, table_methods(r2), f"r² of each method — {model} on {corpus}", png, pdf)


def parameter_table(
    model_dir: str, map_files: dict[str, str], out: str, *, model: str, corpus: str
) -> None:
    """Parameters of one map (layer 0 into the last layer) per method (`map_files`: each
    method's map file), beside mat's d²; with the rows each method was fitted on (its map
    file's metadata) and whether they are fewer than the width (`underdetermined`, warned)."""
    from jtc.files.io import read_json
    from jtc.logs import ready
    from jtc.report.pages import write_table_with_page
    from jtc.shortcuts.maps import parameter_table as parameters
    from jtc.shortcuts.underdetermined import with_training_rows

    ready()
    info = read_json(f"{model_dir}/info.json")
    table = parameters(
        map_files,
        num_layers=info["num_layers"],
        width=info["hidden_size"],
        model=model,
        corpus=corpus,
    )
    write_table_with_page(with_training_rows(table, map_files, model=model, corpus=corpus), out)
