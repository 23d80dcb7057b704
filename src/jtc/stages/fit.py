"""Stages of workflow/rules/fit.smk: each method's shortcut maps, from every source layer."""

from __future__ import annotations

from typing import Any


def fit_map(
    train_dir: str,
    val_dir: str,
    outs: dict[str, str],
    r2_outs: dict[str, str],
    *,
    settings: dict[str, dict[str, Any]],
    maps: dict[str, Any],
    seed: int,
    model: str,
    corpus: str,
    threads: int,
) -> None:
    """The closed-form methods' maps (outs: method -> file; settings: method -> its param,
    jtc.shortcuts.methods.settings_param, made its settings object), from every source layer
    (jtc.shortcuts.fit.fit_methods), the training states read once up to a bound
    (jtc.data.states.LayerStates); each pair scored on the validation states as it is solved,
    r² of every pair written to the method's table (r2_outs: method -> file), the map file
    keeping the pairs and type config `maps` says (jtc.shortcuts.storage). On the GPU when
    the job has one."""
    import numpy as np

    from jtc.data.states import LayerStates
    from jtc.evaluation.r2 import scored_tables
    from jtc.files.io import write_tables
    from jtc.logs import ready
    from jtc.shortcuts.fit import fit_methods
    from jtc.shortcuts.storage import MapStorage

    states = LayerStates(train_dir)
    ready()
    validation = LayerStates(val_dir, np.float64)[:]  # every layer read once, all of them held
    scores = fit_methods(
        states,
        outs,
        settings,
        seed=seed,
        threads=threads,
        model=model,
        corpus=corpus,
        validation=validation,
        storage=MapStorage.of(maps),
    )
    write_tables(scored_tables(scores, model=model, corpus=corpus), r2_outs)


def train_map(
    train_dir: str,
    out: str,
    *,
    model_dir: str | None,
    method: str,
    settings: dict[str, Any],
    seed: int,
    model: str,
    corpus: str,
    threads: int,
) -> None:
    """One method trained by gradient descent (its param `settings`,
    jtc.shortcuts.methods.settings_param), on the stored training rows its `positions` setting
    draws (keyed by `seed`, jtc.data.positions.training_rows_for), its maps from every source
    layer written to `out`, on a GPU if the job has one: through the cached model's decoder
    head (`model_dir`; the tuned lens, jtc.shortcuts.lens), else from the training states alone
    (NJTC, N-NJTC, the one-map methods: jtc.shortcuts.fit.fit_methods, as for the closed-form
    methods)."""
    from jtc.data.states import LayerStates
    from jtc.logs import ready
    from jtc.shortcuts.methods import METHODS

    if not METHODS[method].needs_head:
        from jtc.shortcuts.fit import fit_methods

        states = LayerStates(train_dir)
        ready()
        fit_methods(
            states,
            {method: out},
            {method: settings},
            seed=seed,
            threads=threads,
            model=model,
            corpus=corpus,
        )
        return
    if model_dir is None:
        raise ValueError(f"{method} is trained through the decoder head: it needs the model")
    from jtc.data.positions import training_rows_for
    from jtc.model.head import load_decoder_head
    from jtc.settings import TrainSettings
    from jtc.shortcuts.lens import fit_tuned_lens

    trained = TrainSettings.of(settings)
    states = training_rows_for(LayerStates(train_dir), trained.positions, seed)
    head = load_decoder_head(model_dir, model, threads)
    ready()
    fit_tuned_lens(
        method,
        states,
        out,
        head,
        settings=trained,
        seed=seed,
        threads=threads,
        model=model,
        corpus=corpus,
        groups=states.sentence_ids,
    )
