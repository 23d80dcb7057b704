"""Fitting a method's shortcut maps from the training states alone, one call per method:
`fit_method(method, states, out, ...)` fits the maps from every source layer and writes them to
one map file (jtc.shortcuts.maps.MapWriter), a source layer at a time.

mat and rrr are solved in closed form (jtc.shortcuts.closed_form; each pair scored and the file
written by jtc.shortcuts.closed_fit), on the GPU when the job has one; NJTC, N-NJTC and the
one-map methods are trained on MSE (jtc.shortcuts.train). Torch is imported only when a trained
method is fitted. The tuned lens, trained through the model's decoder head, is
jtc.shortcuts.lens (it shares `map_metadata` and `train_pairs`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from jtc.shortcuts.closed_fit import PairR2
from jtc.shortcuts.storage import MapStorage

if TYPE_CHECKING:
    from jtc.settings import LowRankSettings, Settings
    from jtc.shortcuts.train import TrainResult

log = logging.getLogger(__name__)


def map_metadata(
    states: Sequence[np.ndarray],
    model: str,
    corpus: str,
    method: str,
    groups: np.ndarray | None = None,
) -> dict:
    """A method's map file metadata: what was fitted, on how many sentences (`n_train`: the
    distinct `groups`, each row's sentence; the rows where not given) and on how many training
    rows (`training_rows`, read by jtc.shortcuts.underdetermined: a row per sentence and drawn
    position, or for a map trained on the pooled pairs of every layer, those × layers). Warns
    (logger "jtc") when the rows are fewer than the width of the states, the inputs of one
    output coordinate."""
    from jtc.shortcuts.methods import METHODS
    from jtc.shortcuts.underdetermined import TRAINING_ROWS, warn_if_underdetermined

    n, width = states[0].shape
    pooled = len(states) - 1 if METHODS[method].one_map == "pooled" else 1
    rows = n * pooled
    warn_if_underdetermined(model, corpus, method, rows, width)
    return {
        "method": method,
        "model": model,
        "corpus": corpus,
        "n_train": n if groups is None else len(np.unique(groups)),
        TRAINING_ROWS: rows,
    }


def fit_method(
    method: str,
    states: Sequence[np.ndarray],
    out: str | Path,
    *,
    settings: Settings | None,
    seed: int,
    threads: int,
    model: str,
    corpus: str,
    groups: np.ndarray | None = None,
    validation: Sequence[np.ndarray] | None = None,
    storage: MapStorage | None = None,
) -> list[PairR2]:
    """Fit `method`'s maps (config training.<method>: `settings`, its object of
    jtc.shortcuts.methods.METHODS; None for mat) from the training states
    h_0..h_L of every layer (`states`, rows aligned: a list, or jtc.data.states.LayerStates)
    and write them to the map file `out`: mat and rrr in closed form
    (jtc.shortcuts.closed_fit: scored on the `validation` states as they are solved, the file
    keeping what `storage` says; default every pair in float32), the others trained by
    gradient descent from `seed` (each layer pair from its own, jtc.shortcuts.train.pair_seed;
    `groups`, each row's sentence, keeps a sentence's rows together in the held-out share).
    `model` and `corpus` name the maps in the file's metadata. Returns the closed-form
    methods' r² of every pair (source, target, r²) when `validation` is given, else []."""
    from jtc.shortcuts.closed_fit import fit_closed_form
    from jtc.shortcuts.methods import METHODS

    meta = map_metadata(states, model, corpus, method, groups)
    if METHODS[method].trained:
        _trained(method, states, out, meta, settings, seed, threads, groups)
        return []
    return fit_closed_form(
        method, states, out, meta, settings, threads, validation, storage or MapStorage()
    )


def fit_methods(
    states,
    outs: Mapping[str, str | Path],
    params: Mapping[str, Mapping],
    *,
    seed: int,
    threads: int,
    model: str,
    corpus: str,
    validation: Sequence[np.ndarray] | None = None,
    storage: MapStorage | None = None,
) -> dict[str, list[PairR2]]:
    """fit_method for every method of `outs` (method -> its map file), in that order, on the same
    training states (jtc.data.states.LayerStates, each row's sentence in `sentence_ids`);
    `params`: method -> its rule param (jtc.shortcuts.methods.settings_param), made its
    settings object here. The closed-form methods read every stored row; a trained method the
    rows its `positions` setting draws from them (jtc.data.positions.training_rows_for, keyed
    by `seed`). Returns each method's r² of every pair (fit_method)."""
    from jtc.data.positions import training_rows_for
    from jtc.shortcuts.methods import settings_of

    scores = {}
    for method, out in outs.items():
        settings = settings_of(method, params[method])
        positions = getattr(settings, "positions", "all")  # trained methods only
        rows = training_rows_for(states, positions, seed)
        if rows is not states:
            log.info(
                "%s: %s stored rows of each sentence, %d rows", method, positions, len(rows[0])
            )
        scores[method] = fit_method(
            method,
            rows,
            out,
            settings=settings,
            seed=seed,
            threads=threads,
            model=model,
            corpus=corpus,
            groups=rows.sentence_ids,
            validation=validation,
            storage=storage,
        )
    return scores


def _trained(
    method: str,
    states: Sequence[np.ndarray],
    out: str | Path,
    meta: dict,
    settings: LowRankSettings,
    seed: int,
    threads: int,
    groups: np.ndarray | None,
) -> None:
    """NJTC and N-NJTC: a map per layer pair, by MSE; one_jump and one_jump_selected: one map
    into the last layer, used from every layer (_pooled, _selected)."""
    import torch

    from jtc.shortcuts.methods import METHODS, rank_of
    from jtc.shortcuts.train import train_low_rank

    torch.set_num_threads(threads)
    meta.update(seed=seed, settings=dataclasses.asdict(settings))
    if METHODS[method].one_map == "pooled":
        _pooled(method, states, out, meta, settings, seed, groups)
        return
    if METHODS[method].one_map == "selected":
        _selected(method, states, out, meta, settings, seed, groups)
        return

    def train(source: int, target: int, pair: int) -> TrainResult:
        return train_low_rank(
            states[source],
            states[target],
            rank=rank_of(settings, states[source].shape[1]),
            normalise=method == "nnjtc",
            settings=settings,
            seed=pair,
            groups=groups,
        )

    train_pairs(method, len(states) - 1, out, meta, settings.targets, seed, train)


def train_pairs(
    method: str,
    last: int,
    out: str | Path,
    meta: dict,
    targets: str,
    seed: int,
    train: Callable[[int, int, int], TrainResult],
) -> None:
    """Train a method's maps from every source layer to the target layers `targets` asks for
    (jtc.shortcuts.methods.fitted_targets), `train(source, target, seed)` each pair from its
    own seed (so a map does not depend on which others the job trains), and write them to `out`
    with the training summaries in its metadata."""
    from jtc.logs import Progress
    from jtc.shortcuts.maps import MapWriter
    from jtc.shortcuts.methods import fitted_targets
    from jtc.shortcuts.train import pair_seed

    summaries = {}
    pairs = sum(len(fitted_targets(method, targets, source, last)) for source in range(last))
    progress = Progress(pairs, f"train {method}", "layer pairs")
    with MapWriter(out, meta) as maps:
        for source in range(last):
            results = {}
            for target in fitted_targets(method, targets, source, last):
                result = results[target] = train(
                    source, target, pair_seed(seed, method, source, target)
                )
                log.info(
                    "%s %d -> %d: %s, %.2f s",
                    method,
                    source,
                    target,
                    result.summary(),
                    result.seconds,
                )
                summaries[f"{source}->{target}"] = result.summary()
                progress.update(1)
            maps.add(source, {t: r.tensors for t, r in results.items()})
        maps.metadata["training"] = summaries


def _pooled(
    method: str,
    states: Sequence[np.ndarray],
    out: str | Path,
    meta: dict,
    settings: LowRankSettings,
    seed: int,
    groups: np.ndarray | None,
) -> None:
    """One map trained on the pooled pairs (h_l, h_L) of every layer l < L (one_jump), stored
    as every layer's map into the last."""
    from jtc.shortcuts.maps import MapWriter
    from jtc.shortcuts.methods import rank_of
    from jtc.shortcuts.train import pair_seed, train_low_rank

    last = len(states) - 1
    sources = np.concatenate(states[:last])
    targets = np.concatenate([states[last]] * last)
    result = train_low_rank(
        sources,
        targets,
        rank=rank_of(settings, sources.shape[1]),
        normalise=True,
        settings=settings,
        seed=pair_seed(seed, method, 0, last),
        groups=None if groups is None else np.tile(groups, last),
    )
    log.info("%s, every layer -> %d: %s, %.2f s", method, last, result.summary(), result.seconds)
    with MapWriter(out, meta) as maps:
        for source in range(last):
            maps.add(source, {last: result.tensors})
        maps.metadata["training"] = {f"0..{last - 1}->{last}": result.summary()}


def _selected(
    method: str,
    states: Sequence[np.ndarray],
    out: str | Path,
    meta: dict,
    settings: LowRankSettings,
    seed: int,
    groups: np.ndarray | None,
) -> None:
    """One of the per-layer N-NJTC maps into the last layer (each trained from N-NJTC's seed
    for its pair: with N-NJTC's settings, they are N-NJTC's maps), chosen by
    jtc.shortcuts.selection and stored as every layer's map into the last (one_jump_selected)."""
    from jtc.logs import Progress
    from jtc.shortcuts.maps import MapWriter, ShortcutMap
    from jtc.shortcuts.methods import rank_of
    from jtc.shortcuts.selection import select_one_map
    from jtc.shortcuts.train import pair_seed, train_low_rank

    last = len(states) - 1
    progress = Progress(last, f"train {method}", "candidate maps")
    candidates, summaries = {}, {}
    for source in range(last):
        result = train_low_rank(
            states[source],
            states[last],
            rank=rank_of(settings, states[source].shape[1]),
            normalise=True,
            settings=settings,
            seed=pair_seed(seed, "nnjtc", source, last),
            groups=groups,
        )
        candidates[source] = result.tensors
        summaries[f"{source}->{last}"] = result.summary()
        progress.update(1)
    chosen, scores = select_one_map(
        {s: ShortcutMap(t) for s, t in candidates.items()}, states, last
    )
    log.info("%s: the map from layer %d, mean cosine %.4f", method, chosen, scores[chosen])
    with MapWriter(out, meta) as maps:
        for source in range(last):
            maps.add(source, {last: candidates[chosen]})
        maps.metadata.update(
            training=summaries,
            selected_source=chosen,
            mean_cosine={str(s): float(v) for s, v in scores.items()},
        )
