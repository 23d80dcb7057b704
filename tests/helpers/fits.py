"""Map files of any methods fitted from a training states folder, as the workflow's fit jobs fit
them (jtc.shortcuts.fit.fit_methods), every pair kept in float32 and nothing scored: the tests'
way to get maps without the validation states the fit_map stage also reads."""

from __future__ import annotations

from typing import Any

from jtc.data.states import LayerStates
from jtc.shortcuts.fit import fit_methods


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
    """Fit every method of `outs` (method -> its map file) with its param in `settings`."""
    fit_methods(
        LayerStates(train_dir),
        outs,
        settings,
        seed=seed,
        threads=threads,
        model=model,
        corpus=corpus,
    )
