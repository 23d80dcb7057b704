"""The shortcut methods: what each needs and which layer pairs it fits (torch-free, for planning).

Every method but id stores its maps the same way (jtc.maps), one file per source layer, so the
stages that use maps need no method-specific code. Only the fitting stages differ: mat is solved
in closed form (jtc.fit), the others are trained (jtc.train).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

AUTO_ALL_PAIRS_MAX_LAYERS = 12  # targets "auto": every pair up to this depth, else into the last


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    trained: bool = False
    needs_head: bool = False  # trained through the model's decoder head
    last_only: bool = False  # maps into the last layer only
    defaults: dict[str, Any] = field(default_factory=dict)  # config training.<name>


_LOW_RANK = {
    "rank": None,  # None: floor(d / 100), at least 1
    "targets": "auto",
    "optimizer": "adam",
    "learning_rate": 0.01,
    "max_epochs": 100,
    "batch_size": 128,
    "holdout_fraction": 0.1,
    "patience": 10,
    "weight_decay": 0.0,
    "schedule": "cosine",
}

METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("id", "the identity (logit lens)"),
        Method("mat", "least-squares d × d map, no intercept (JTC)"),
        Method("njtc", "rank-r product A·B by gradient descent on MSE", True, defaults=_LOW_RANK),
        Method(
            "nnjtc",
            "batch normalisation, then a rank-r product A·B (N-NJTC)",
            True,
            defaults=_LOW_RANK,
        ),
        Method(
            "tuned_lens",
            "affine translator h + W h + b into the last layer, trained by KL to the model's "
            "final prediction",
            True,
            needs_head=True,
            last_only=True,
            defaults={
                "optimizer": "adam",
                "learning_rate": 0.001,
                "max_epochs": 5,
                "batch_size": 128,
                "holdout_fraction": 0.1,
                "patience": 2,
                "weight_decay": 0.0,
                "schedule": "cosine",
            },
        ),
    )
}


def training_settings(config: dict[str, Any], method: str) -> dict[str, Any]:
    """A trained method's settings: its defaults updated by config training.<method>."""
    spec = METHODS[method]
    return {**spec.defaults, **config.get("training", {}).get(method, {})}


def applicable(method: str, predicts: bool) -> bool:
    """Whether a method can be fitted for a model (the tuned lens needs a decoder head)."""
    return predicts or not METHODS[method].needs_head


def fitted_targets(method: str, targets: str, source: int, num_layers: int) -> list[int]:
    """The target layers a method fits from `source`: every later layer, or the last only.

    `targets` is config training.<method>.targets: all, last, or auto (all for models of at
    most AUTO_ALL_PAIRS_MAX_LAYERS layers, last beyond)."""
    last_only = METHODS[method].last_only or targets == "last"
    if targets == "auto":
        last_only = last_only or num_layers > AUTO_ALL_PAIRS_MAX_LAYERS
    return [num_layers] if last_only else list(range(source + 1, num_layers + 1))
