"""Stages of workflow/rules/metrics.smk: r² of every layer pair, its heatmaps, the parameter
counts of every method."""

from __future__ import annotations


def r2_table(
    val_dir: str, maps: dict[str, str | None], out: str, *, model: str, corpus: str, threads: int
) -> None:
    """r² of every method on every pair l < l' of the validation states (`maps`: per method
    its map file; None for id). On the GPU when the job has one."""
    from threadpoolctl import threadpool_limits

    from jtc.data.states import read_aligned, read_states
    from jtc.devices import linalg_device
    from jtc.evaluation.r2 import layer_r2_table
    from jtc.files.io import read_json, write_table
    from jtc.logs import ready

    ready()
    n_layers = read_json(f"{val_dir}/info.json")["num_layers"]
    ids, first = read_states(val_dir, 0)
    states = [first] + [read_aligned(val_dir, layer, ids) for layer in range(1, n_layers + 1)]
    with threadpool_limits(threads):
        table = layer_r2_table(states, maps, model=model, corpus=corpus, device=linalg_device())
    write_table(table, out, csv=True)


def plot_r2(table: str, png: str, pdf: str, *, model: str, corpus: str) -> None:
    """The r² heatmaps of every method in the table (source layer × target layer), side by
    side."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.report.figures.r2 import r2_heatmaps
    from jtc.shortcuts.methods import METHODS

    ready()
    r2 = read_table(table)
    present = set(r2.column("method").to_pylist())
    methods = [m for m in METHODS if m in present]
    r2_heatmaps(r2, methods, f"r² of each method — {model} on {corpus}", png, pdf)


def parameter_table(
    model_dir: str, map_files: dict[str, str], out: str, *, model: str, corpus: str
) -> None:
    """Parameters of one map (layer 0 into the last layer) per method (`map_files`: each
    method's map file), beside mat's d²; with the rows each method was fitted on (its map
    file's metadata) and whether they are fewer than the width (`underdetermined`, warned)."""
    from jtc.files.io import read_json, write_table
    from jtc.logs import ready
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
    write_table(with_training_rows(table, map_files, model=model, corpus=corpus), out, csv=True)
