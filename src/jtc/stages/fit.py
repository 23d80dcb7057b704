"""Stages of workflow/rules/fit.smk: each method's shortcut maps, from every source layer."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def _all_layers(train_dir: str) -> tuple[list, int]:
    """The training states of every layer 0..L as float32, rows aligned with layer 0's."""
    import numpy as np

    from jtc.files.io import read_aligned, read_json, read_states

    last = read_json(f"{train_dir}/info.json")["num_layers"]
    ids, first = read_states(train_dir, 0, np.float32)
    rest = [read_aligned(train_dir, layer, ids, np.float32) for layer in range(1, last + 1)]
    return [first, *rest], last


def _metadata(states: list, model: str, corpus: str, method: str) -> dict:
    """A method's map file metadata: what was fitted, on how many sentences (`n_train`) and on
    how many training rows (`training_rows`, read by jtc.shortcuts.underdetermined: the sentences,
    or for
    a map trained on the pooled pairs of every layer, sentences × layers). Warns (logger "jtc")
    when the rows are fewer than the width of the states, the inputs of one output coordinate."""
    from jtc.shortcuts.methods import METHODS
    from jtc.shortcuts.underdetermined import TRAINING_ROWS, warn_if_underdetermined

    sentences, width = states[0].shape
    pooled = len(states) - 1 if METHODS[method].one_map == "pooled" else 1
    rows = sentences * pooled
    warn_if_underdetermined(model, corpus, method, rows, width)
    return {
        "method": method,
        "model": model,
        "corpus": corpus,
        "n_train": sentences,
        TRAINING_ROWS: rows,
    }


def fit_map(
    train_dir: str,
    outs: dict[str, str],
    *,
    settings: dict[str, dict],
    seed: int,
    model: str,
    corpus: str,
    threads: int,
) -> None:
    """The maps of every method fitted from the training states alone (outs: method -> file),
    from every source layer, the states read once: mat and rrr in closed form (_closed_form),
    NJTC and N-NJTC trained by gradient descent (_trained). On the GPU when the job has one;
    torch is imported only when a trained method is asked for."""
    from jtc.logs import ready
    from jtc.shortcuts.methods import METHODS

    states, last = _all_layers(train_dir)
    ready()
    for method, out in outs.items():
        meta = _metadata(states, model, corpus, method)
        if METHODS[method].trained:
            _trained(states, last, out, meta, settings[method], seed, threads)
        else:
            _closed_form(states, last, out, meta, settings[method], threads)


def _closed_form(
    states: list, last: int, out: str, meta: dict, settings: dict, threads: int
) -> None:
    """mat, least squares without intercept into every later layer; rrr, its rank-r truncation
    in the metric of the source states, into the layers NJTC fits."""
    from threadpoolctl import threadpool_limits

    from jtc.devices import linalg_device
    from jtc.shortcuts.closed_form import fit_source, fit_source_reduced_rank
    from jtc.shortcuts.maps import MapWriter
    from jtc.shortcuts.methods import fitted_targets, rank_of

    method = meta["method"]
    device = linalg_device()
    solvers = {}
    if method == "rrr":
        meta.update(rank=rank_of(settings, states[0].shape[1]), targets=settings["targets"])
    with MapWriter(out, meta) as maps, threadpool_limits(threads):
        for source in range(last):
            targets = fitted_targets(method, settings.get("targets", "all"), source, last)
            pairs = ((t, states[t]) for t in targets)
            if method == "rrr":
                fitted, solver = fit_source_reduced_rank(
                    states[source], pairs, meta["rank"], device
                )
            else:
                fitted, solver = fit_source(states[source], pairs, device)
            maps.add(source, fitted)
            solvers[source] = solver
        maps.metadata["solvers"] = solvers


def _pooled(
    states: list, last: int, out: str, meta: dict, settings: dict, training, seed: int
) -> None:
    """One map trained on the pooled pairs (h_l, h_L) of every layer l < L (one_jump), stored
    as every layer's map into the last."""
    import numpy as np

    from jtc.shortcuts.maps import MapWriter
    from jtc.shortcuts.methods import rank_of
    from jtc.shortcuts.train import pair_seed, train_low_rank

    sources = np.concatenate(states[:last])
    targets = np.concatenate([states[last]] * last)
    method = meta["method"]
    result = train_low_rank(
        sources,
        targets,
        rank=rank_of(settings, sources.shape[1]),
        normalise=True,
        settings=training,
        seed=pair_seed(seed, method, 0, last),
    )
    log.info("%s, every layer -> %d: %s, %.2f s", method, last, result.summary(), result.seconds)
    with MapWriter(out, meta) as maps:
        for source in range(last):
            maps.add(source, {last: result.tensors})
        maps.metadata["training"] = {f"0..{last - 1}->{last}": result.summary()}


def _selected(
    states: list, last: int, out: str, meta: dict, settings: dict, training, seed: int
) -> None:
    """One of the per-layer N-NJTC maps into the last layer (each trained from N-NJTC's seed
    for its pair: with N-NJTC's settings, they are N-NJTC's maps), chosen by
    jtc.shortcuts.selection and
    stored as every layer's map into the last (one_jump_selected)."""
    from jtc.logs import Progress
    from jtc.shortcuts.maps import MapWriter, ShortcutMap
    from jtc.shortcuts.methods import rank_of
    from jtc.shortcuts.selection import select_one_map
    from jtc.shortcuts.train import pair_seed, train_low_rank

    method = meta["method"]
    progress = Progress(last, f"train {method}", "candidate maps")
    candidates, summaries = {}, {}
    for source in range(last):
        result = train_low_rank(
            states[source],
            states[last],
            rank=rank_of(settings, states[source].shape[1]),
            normalise=True,
            settings=training,
            seed=pair_seed(seed, "nnjtc", source, last),
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


def train_map(
    train_dir: str,
    out: str,
    *,
    model_dir: str,
    method: str,
    settings: dict,
    seed: int,
    model: str,
    corpus: str,
    threads: int,
) -> None:
    """A method trained through the cached model's decoder head (the tuned lens): its maps from
    every source layer into the last, on a GPU if the job has one."""
    from jtc.logs import ready
    from jtc.model.head import load_decoder_head

    states, last = _all_layers(train_dir)
    head = load_decoder_head(model_dir, model, threads)
    ready()
    meta = _metadata(states, model, corpus, method)
    _trained(states, last, out, meta, settings, seed, threads, head)


def _trained(
    states: list,
    last: int,
    out: str,
    meta: dict,
    settings: dict,
    seed: int,
    threads: int,
    head=None,
) -> None:
    """Train a method's maps from every source layer to the target layers its settings ask for
    (jtc.shortcuts.methods.fitted_targets), each pair from its own seed (so a map does not depend
    on which
    others the job trains): by MSE (NJTC, N-NJTC), or by KL through `head` (the tuned lens)."""
    import torch

    from jtc.logs import Progress
    from jtc.shortcuts.maps import MapWriter
    from jtc.shortcuts.methods import METHODS, fitted_targets, rank_of
    from jtc.shortcuts.train import (
        TrainSettings,
        lens_reference,
        pair_seed,
        train_low_rank,
        train_tuned_lens,
    )

    torch.set_num_threads(threads)
    method = meta["method"]
    training = TrainSettings.from_config(settings)
    # the tuned lens's final prediction: decoded once for every source layer
    reference = None if head is None else lens_reference(head, states[last])
    meta.update(seed=seed, settings=settings)
    summaries = {}
    targets = settings.get("targets", "last")
    if METHODS[method].one_map == "pooled":
        _pooled(states, last, out, meta, settings, training, seed)
        return
    if METHODS[method].one_map == "selected":
        _selected(states, last, out, meta, settings, training, seed)
        return
    pairs = sum(len(fitted_targets(method, targets, source, last)) for source in range(last))
    progress = Progress(pairs, f"train {method}", "layer pairs")
    with MapWriter(out, meta) as maps:
        for source in range(last):
            results = {}
            for target in fitted_targets(method, targets, source, last):
                pair = pair_seed(seed, method, source, target)
                if head is not None:  # the final prediction is read from the last layer
                    results[target] = train_tuned_lens(
                        states[source],
                        head,
                        states[target],
                        settings=training,
                        seed=pair,
                        reference=reference,
                    )
                else:
                    results[target] = train_low_rank(
                        states[source],
                        states[target],
                        rank=rank_of(settings, states[source].shape[1]),
                        normalise=method == "nnjtc",
                        settings=training,
                        seed=pair,
                    )
                result = results[target]
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
