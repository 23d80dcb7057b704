"""Stages of workflow/rules/fit.smk: each method's shortcut maps, from every source layer."""

from __future__ import annotations

from typing import Any


def fit_map(
    train_dir: str,
    outs: dict[str, str],
    *,
    settings: dict[str, dict[str, Any]],
    seed: int,
    model: str,
    corpus: str,
    threads: int,
) -> None:
    """The maps of the methods fitted from the training states alone (outs: method -> file;
    settings: method -> its param, jtc.shortcuts.methods.settings_param, made its settings
    object), from every source layer (jtc.shortcuts.fit.fit_methods), the states read once up
    to a bound (jtc.data.states.LayerStates). The workflow's fit_map job gives it the
    closed-form methods (mat, rrr, every stored row); a trained method given here gets the
    maps its own train_map job would (the same rows and seeds). On the GPU when the job has
    one; torch is imported only when a trained method is asked for."""
    from jtc.data.states import LayerStates
    from jtc.logs import ready
    from jtc.shortcuts.fit import fit_methods

    states = LayerStates(train_dir)
    ready()
    fit_methods(states, outs, settings, seed=seed, threads=threads, model=model, corpus=corpus)


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
    (NJTC, N-NJTC, the one-map methods: fit_map's fit, one method, the same maps)."""
    from jtc.shortcuts.methods import METHODS

    if not METHODS[method].needs_head:
        fit_map(
            train_dir,
            {method: out},
            settings={method: settings},
            seed=seed,
            model=model,
            corpus=corpus,
            threads=threads,
        )
        return
    if model_dir is None:
        raise ValueError(f"{method} is trained through the decoder head: it needs the model")
    from jtc.data.positions import training_rows_for
    from jtc.data.states import LayerStates
    from jtc.logs import ready
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
