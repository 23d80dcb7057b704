"""Stages of workflow/rules/fit.smk: the shortcut maps from one source layer."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def fit_mat(
    train_dir: str, out: str, *, source: int, model: str, corpus: str, threads: int
) -> None:
    """Fit mat (least squares, no intercept) from `source` to every later layer on the
    training states (on the GPU when the job has one)."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from ..devices import linalg_device
    from ..fit import fit_source
    from ..io import read_aligned, read_json, read_states
    from ..maps import save_maps

    info = read_json(f"{train_dir}/info.json")
    ids, x = read_states(train_dir, source)
    # targets stay float32 here: fit_source copies them into its float64 buffer
    targets = (
        (t, read_aligned(train_dir, t, ids, dtype=np.float32))
        for t in range(source + 1, info["num_layers"] + 1)
    )
    with threadpool_limits(threads):
        weights, solver = fit_source(x, targets, linalg_device())
    meta = {"method": "mat", "model": model, "corpus": corpus, "source_layer": source}
    save_maps(out, weights, {**meta, "n_train": len(ids), "solver": solver})


def train_map(
    train_dir: str,
    out: str,
    *,
    model_dir: str | None,
    method: str,
    source: int,
    settings: dict,
    seed: int,
    model: str,
    corpus: str,
    threads: int,
) -> None:
    """Train a method's maps from `source` to the target layers its settings ask for
    (jtc.methods.fitted_targets), on a GPU if the job has one; the tuned lens trains through
    the cached model's decoder head."""
    import numpy as np
    import torch

    from ..io import read_aligned, read_json, read_states
    from ..maps import save_maps
    from ..methods import fitted_targets
    from ..train import TrainSettings, default_rank, pair_seed, train_low_rank, train_tuned_lens

    torch.set_num_threads(threads)
    info = read_json(f"{train_dir}/info.json")
    targets = fitted_targets(method, settings.get("targets", "last"), source, info["num_layers"])
    ids, x = read_states(train_dir, source)
    training = TrainSettings.from_config(settings)
    results = {}
    if method == "tuned_lens":
        if model_dir is None:
            raise ValueError("the tuned lens is trained through the model's head: no model given")
        from ..models import load_head  # transformers: imported only by the jobs that need it

        head, _, _ = load_head(model_dir, model, threads)
        for target in targets:  # the last layer: the final prediction is read from its states
            final = read_aligned(train_dir, target, ids, np.float32)
            seed_t = pair_seed(seed, method, source, target)
            results[target] = train_tuned_lens(x, head, final, settings=training, seed=seed_t)
    else:
        rank = settings["rank"] or default_rank(x.shape[1])
        for target in targets:
            results[target] = train_low_rank(
                x,
                read_aligned(train_dir, target, ids, np.float32),
                rank=rank,
                normalise=method == "nnjtc",
                settings=training,
                seed=pair_seed(seed, method, source, target),
            )
    for target, result in results.items():
        log.info(
            "%s %d -> %d: %s, %.2f s", method, source, target, result.summary(), result.seconds
        )
    save_maps(
        out,
        {t: r.tensors for t, r in results.items()},
        {
            "method": method,
            "model": model,
            "corpus": corpus,
            "source_layer": source,
            "n_train": len(ids),
            "seed": seed,
            "settings": settings,
            "training": {str(t): r.summary() for t, r in results.items()},
        },
    )
