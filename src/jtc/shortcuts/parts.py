"""Linear shortcuts across sub-modules (torch-free): a least-squares map per (block, part) from
the part's recorded input to its output (`fit_part_maps` writes them all to one file), its r²
on held-out states, and which parts each replacement variant swaps for its maps.

Blocks are numbered 1..L (block b maps h_{b-1} to h_b); the parts are jtc.model.adapters.PART_NAMES.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from jtc.data.states import part_file, read_site, read_site_aligned
from jtc.files.io import read_json, rows_table
from jtc.shortcuts.closed_form import fit_source
from jtc.shortcuts.maps import PartMapWriter, ShortcutMap
from jtc.shortcuts.quality import shortcut_r2

if TYPE_CHECKING:
    import torch

# replacement variant -> the parts it replaces by their maps in every block after the jump
VARIANTS: dict[str, tuple[str, ...]] = {
    "mat_attn": ("attn",),
    "mat_ffn": ("ffn",),
    "mat_ln": ("attn_norm", "ffn_norm"),
}

PART_R2_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "block": pa.int32(),  # 1..L
    "part": pa.string(),  # attn_norm, attn, ffn_norm, ffn
    "module": pa.string(),  # the architecture's module(s), e.g. ln_1 or attention.self->...dense
    "r2": pa.float64(),
}


def jump_layers(configured: list[int], stride: int, num_layers: int) -> list[int]:
    """The jump layers to evaluate: the configured ones, or if none every `stride`-th layer
    from 0, and L-1 (stride 1: every layer 0..L-1)."""
    if configured:
        return sorted(configured)
    return sorted({*range(0, num_layers, stride), num_layers - 1})


def jump_problem(model: str, num_layers: int, configured: list[int]) -> str | None:
    """A configured jump layer outside 0..L for a model of `num_layers` blocks."""
    bad = [x for x in configured if not 0 <= x <= num_layers]
    if bad:
        return (
            f"config key 'submodules.jump_layers': layers {bad} are outside 0..{num_layers} for "
            f"model '{model}' ({num_layers} layers)"
        )
    return None


def recorded_parts(states_dir: str | Path) -> dict[str, str]:
    """{part name: module description} of a folder of recorded parts (its info.json)."""
    info = read_json(Path(states_dir) / "info.json")
    return {name: "->".join(dict.fromkeys(paths)) for name, paths in info["parts"].items()}


def fit_parts(
    train_dir: str | Path,
    blocks: Sequence[int] | None = None,
    device: torch.device | None = None,
) -> tuple[dict[tuple[int, str], np.ndarray], dict, dict]:
    """The no-intercept least-squares weight (d_out, d_in) of every part of `blocks` (default
    all, 1..L), the solver used for each and its Gram matrix's numerical rank
    (jtc.shortcuts.closed_form.gram_rank; both keyed "block.part"), from the recorded training
    inputs and outputs (on `device`, a GPU, when given)."""
    if blocks is None:
        blocks = range(1, read_json(Path(train_dir) / "info.json")["num_layers"] + 1)
    parts = recorded_parts(train_dir)
    weights: dict[tuple[int, str], np.ndarray] = {}
    solvers: dict[str, str] = {}
    ranks: dict[str, int] = {}
    for block in blocks:
        for part in parts:
            ids, x = read_site(part_file(train_dir, block, part, "in"))
            y = read_site_aligned(part_file(train_dir, block, part, "out"), ids, np.float32)
            fitted, solver, rank = fit_source(x, [(0, y)], device)
            weights[(block, part)] = fitted[0]
            solvers[f"{block}.{part}"], ranks[f"{block}.{part}"] = solver, rank
    return weights, solvers, ranks


def fit_part_maps(
    train_dir: str | Path,
    out: str | Path,
    *,
    model: str,
    corpus: str,
    threads: int,
    device: torch.device | None = None,
) -> None:
    """The maps of every part of every block (fit_parts) fitted from the recorded training
    inputs and outputs and written to the part map file `out` a block at a time (on `device`,
    a GPU, when given, else numpy limited to `threads`), with the rows they were fitted on.
    Warns (logger "jtc") for the parts fitted on fewer rows than their input width, and for
    those whose inputs' Gram matrix has a rank below it."""
    from threadpoolctl import threadpool_limits

    from jtc.shortcuts.underdetermined import (
        GRAM_RANKS,
        TRAINING_ROWS,
        warn_rank_deficient_parts,
        warn_underdetermined_parts,
    )

    info = read_json(Path(train_dir) / "info.json")
    sentences = info["sentences"]
    rows = info.get("rows", sentences)  # a row per (sentence, position), in every part's files
    meta = {
        "method": "mat",
        "model": model,
        "corpus": corpus,
        "n_train": sentences,
        TRAINING_ROWS: rows,
    }
    solvers, ranks = {}, {}
    widths: dict[str, int] = {}  # part -> its input width (the widest over the blocks)
    input_widths: dict[str, int] = {}  # "block.part" -> its input width
    with PartMapWriter(out, meta) as maps, threadpool_limits(threads):
        for block in range(1, info["num_layers"] + 1):
            weights, block_solvers, block_ranks = fit_parts(train_dir, [block], device)
            maps.add(block, {part: weight for (_, part), weight in weights.items()})
            solvers.update(block_solvers)
            ranks.update(block_ranks)
            for (_, part), weight in weights.items():
                widths[part] = max(widths.get(part, 0), weight.shape[1])
                input_widths[f"{block}.{part}"] = weight.shape[1]
        maps.metadata["solvers"] = solvers
        maps.metadata[GRAM_RANKS] = ranks
    warn_underdetermined_parts(model, corpus, rows, widths)
    warn_rank_deficient_parts(model, corpus, rows, ranks, input_widths)


def part_r2_table(
    val_dir: str | Path,
    maps: dict[tuple[int, str], ShortcutMap],
    *,
    model: str,
    corpus: str,
    device: torch.device | None = None,
) -> pa.Table:
    """r² of every (block, part) map on the recorded validation inputs and outputs (on
    `device`, a GPU, when given)."""
    modules = recorded_parts(val_dir)
    rows = []
    for (block, part), shortcut in sorted(maps.items()):
        if part not in modules:
            raise ValueError(f"the maps have part '{part}', which {val_dir} did not record")
        ids, x = read_site(part_file(val_dir, block, part, "in"))
        y = read_site_aligned(part_file(val_dir, block, part, "out"), ids)
        rows.append(
            {
                "model": model,
                "corpus": corpus,
                "block": block,
                "part": part,
                "module": modules[part],
                "r2": shortcut_r2(y, x, shortcut, device),
            }
        )
    return rows_table(rows, PART_R2_COLUMNS)
