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
    """The maps of every method fitted from the training states alone (outs: method -> file;
    settings: method -> its param, jtc.shortcuts.methods.settings_param, made its settings
    object), from every source layer (jtc.shortcuts.fit.fit_methods: mat and rrr in closed form,
    NJTC, N-NJTC and the one-map methods by gradient descent), the states read once up to a
    bound (jtc.data.states.LayerStates). On the GPU when the job has one; torch is imported only
    when a trained method is asked for."""
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
    model_dir: str,
    method: str,
    settings: dict[str, Any],
    seed: int,
    model: str,
    corpus: str,
    threads: int,
) -> None:
    """A method trained through the cached model's decoder head (the tuned lens,
    jtc.shortcuts.lens): its maps from every source layer into the last, on a GPU if the job
    has one; on the stored training rows its `positions` setting draws (keyed by `seed`)."""
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
