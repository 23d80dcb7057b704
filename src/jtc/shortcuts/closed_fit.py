"""The closed-form methods' map files (mat, rrr; jtc.shortcuts.closed_form), a source layer at a
time: every map scored on the validation states as it is solved (r² of the map as fitted,
rounded to float32), and written only where the storage settings keep it
(jtc.shortcuts.storage: the maps into the last layer, or every pair; in float32 or 16 bits,
with each stored map's own r² recorded when it is rounded further). So the r² table covers
every pair while the file grows with L·d², and a job holds one buffer of maps at a time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from jtc.shortcuts.storage import KEPT, STORED_R2, MapStorage

if TYPE_CHECKING:
    from jtc.settings import RankSettings

EVERY_PAIR = MapStorage()  # every pair, float32
PairR2 = tuple[int, int, float]  # (source layer, target layer, r²)


def _float32(parts: np.ndarray | dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A solved map's parts as stored in float32 (a bare array is a full matrix)."""
    if isinstance(parts, np.ndarray):
        parts = {"weight": parts}
    return {name: np.asarray(value, dtype=np.float32) for name, value in parts.items()}


def _solved_maps(
    method: str, x: np.ndarray, pairs, rank: int | None, device
) -> tuple[Iterator[tuple[int, dict[str, np.ndarray]]], str, int]:
    """(the maps from one source, target by target, in float32; the solver; the Gram rank)."""
    from jtc.shortcuts.closed_form import fit_source_reduced_rank, solve_source

    if method == "rrr":
        fitted, solver, gram_rank = fit_source_reduced_rank(x, pairs, rank, device)
        return ((t, _float32(p)) for t, p in fitted.items()), solver, gram_rank
    solver, maps = solve_source(x, pairs, device)
    return ((t, _float32(w)) for t, w in maps), solver.method, solver.rank


def fit_closed_form(
    method: str,
    states: Sequence[np.ndarray],
    out: str | Path,
    meta: dict,
    settings: RankSettings | None,
    threads: int,
    validation: Sequence[np.ndarray] | None = None,
    storage: MapStorage = EVERY_PAIR,
) -> list[PairR2]:
    """mat, least squares without intercept into every later layer; rrr, its rank-r truncation
    in the metric of the source states, into the layers NJTC fits: solved from the training
    states h_0..h_L (`states`), scored on `validation` (float64, the same layers; None: not
    scored), written to `out` as `storage` says. Returns r² of every fitted pair. The numerical
    rank of each source layer's Gram matrix goes into the file's metadata (GRAM_RANKS), warned
    below the width."""
    from threadpoolctl import threadpool_limits

    from jtc.devices import float64_on, linalg_device
    from jtc.files.tensors import rounded
    from jtc.shortcuts.maps import MapWriter, ShortcutMap
    from jtc.shortcuts.methods import fitted_targets, rank_of
    from jtc.shortcuts.quality import shortcut_r2
    from jtc.shortcuts.underdetermined import GRAM_RANKS, TRAINING_ROWS, warn_if_rank_deficient

    last = len(states) - 1
    device = linalg_device()
    if validation is not None and device is not None:  # copied to the GPU once
        validation = [float64_on(device, v) for v in validation]
    solvers, ranks, scores, stored_r2 = {}, {}, [], {}
    targets_setting = "all" if settings is None else settings.targets  # mat: every pair
    if settings is not None:  # rrr
        meta.update(rank=rank_of(settings, states[0].shape[1]), targets=settings.targets)
    meta[KEPT] = storage.pairs

    def r2(source: int, target: int, parts: dict[str, np.ndarray]) -> float:
        return shortcut_r2(validation[target], validation[source], ShortcutMap(parts), device)

    with MapWriter(out, meta, storage.dtype) as maps, threadpool_limits(threads):
        for source in range(last):
            targets = fitted_targets(method, targets_setting, source, last)
            pairs = ((t, states[t]) for t in targets)
            solved, solver, rank = _solved_maps(
                method, states[source], pairs, meta.get("rank"), device
            )
            for target, parts in solved:
                if validation is not None:
                    scores.append((source, target, r2(source, target, parts)))
                if not storage.keeps(target, last):
                    continue
                try:
                    maps.add(source, {target: parts})
                except OverflowError as exc:
                    raise ValueError(
                        f"{method}'s map from layer {source} to layer {target}: {exc} "
                        f"(config maps.dtype)"
                    ) from None
                if validation is not None and storage.dtype != "float32":
                    kept = {n: rounded(v, storage.dtype) for n, v in parts.items()}
                    stored_r2[f"{source}->{target}"] = r2(source, target, kept)
            solvers[source], ranks[source] = solver, rank
        maps.metadata["solvers"] = solvers
        maps.metadata[GRAM_RANKS] = ranks
        if stored_r2:
            maps.metadata[STORED_R2] = stored_r2
    labelled = {f"layer {source}": rank for source, rank in ranks.items()}
    width, rows = states[0].shape[1], meta[TRAINING_ROWS]
    warn_if_rank_deficient(meta["model"], meta["corpus"], method, labelled, width, rows)
    return scores
