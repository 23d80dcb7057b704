"""The shortcut methods: what each needs and which layer pairs it fits (torch-free, for planning).

Every method but id stores its maps the same way (jtc.shortcuts.maps), one file per model, corpus
and method, so the stages that use maps need no method-specific code. Only the fitting differs:
mat and rrr are solved in closed form (jtc.shortcuts.closed_form), the others are trained
(jtc.shortcuts.train, jtc.shortcuts.lens); every method that needs the training states alone is
fitted by jtc.shortcuts.fit.fit_method (rule fit_map, one job per (model, corpus)), and the
tuned lens, trained through the model's head, by jtc.shortcuts.lens.fit_tuned_lens (rule
train_map).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

AUTO_ALL_PAIRS_MAX_LAYERS = 12  # targets "auto": every pair up to this depth, else into the last


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    # by gradient descent (jtc.shortcuts.train); else closed form (jtc.shortcuts.closed_form)
    trained: bool = False
    needs_head: bool = False  # trained through the model's decoder head
    last_only: bool = False  # maps into the last layer only
    # one map used from every layer into the last: "pooled" (trained on the pooled pairs of all
    # layers) or "selected" (one of the per-layer maps, chosen); None: a map per layer
    one_map: str | None = None
    defaults: dict[str, Any] = field(default_factory=dict)  # config training.<name>


_LOW_RANK = {
    "rank": None,  # None: floor(d / 100), at least 1
    "targets": "auto",
    "optimizer": "adam",
    "learning_rate": 3e-4,  # from the rrr start: small steps (bench/bench_train.py)
    "max_epochs": 100,
    "batch_size": 128,
    "holdout_fraction": 0.1,
    "patience": 3,
    "weight_decay": 0.0,
    "schedule": "cosine",
    "warm_start": True,  # from the reduced-rank regression (jtc.shortcuts.train)
}

METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("id", "the identity (logit lens)"),
        Method("mat", "least-squares d × d map, no intercept (JTC)"),
        Method("njtc", "rank-r product A·B by gradient descent on MSE", True, defaults=_LOW_RANK),
        Method(
            "rrr",
            "reduced-rank regression: the closed-form optimum of NJTC's objective (rank as NJTC)",
            defaults={"rank": None, "targets": None},  # None: NJTC's
        ),
        Method(
            "nnjtc",
            "batch normalisation, then a rank-r product A·B (N-NJTC)",
            True,
            defaults=_LOW_RANK,
        ),
        Method(
            "one_jump",
            "one batch-normalised rank-r map A·B from every layer into the last, trained on the "
            "pooled pairs of all layers (ours, after OJFA)",
            True,
            last_only=True,
            one_map="pooled",
            defaults=_LOW_RANK,
        ),
        Method(
            "one_jump_selected",
            "one of N-NJTC's per-layer maps into the last, used from every layer: the one whose "
            "predictions from all layers have the highest mean cosine similarity to the last "
            "layer's states (ours, after OJFA's selection)",
            True,
            last_only=True,
            one_map="selected",
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
                "learning_rate": 3e-5,  # from the least-squares start: small steps
                "max_epochs": 2,
                "batch_size": 128,
                "holdout_fraction": 0.1,
                "patience": 1,
                "weight_decay": 0.0,
                "schedule": "cosine",
                "warm_start": True,  # from the least-squares affine map (jtc.shortcuts.train)
            },
        ),
    )
}


def training_settings(config: dict[str, Any], method: str) -> dict[str, Any]:
    """A method's settings: its defaults updated by config training.<method>; rrr's rank and
    targets, unless set, are NJTC's (so that rrr is the optimum of the objective NJTC trains)."""
    spec = METHODS[method]
    settings = {**spec.defaults, **config.get("training", {}).get(method, {})}
    if method == "rrr":
        njtc = training_settings(config, "njtc")
        settings = {k: njtc[k] if v is None else v for k, v in settings.items()}
    return settings


def applicable(method: str, predicts: bool) -> bool:
    """Whether a method can be fitted for a model (the tuned lens needs a decoder head)."""
    return predicts or not METHODS[method].needs_head


def default_rank(width: int) -> int:
    """NJTC's rank: floor(d / 100), at least 1."""
    return max(1, width // 100)


def rank_of(settings: dict[str, Any], width: int) -> int:
    """A low-rank method's rank: config training.<method>.rank, or default_rank(d)."""
    return settings.get("rank") or default_rank(width)


def fitted_targets(method: str, targets: str, source: int, num_layers: int) -> list[int]:
    """The target layers a method fits from `source`: every later layer, or the last only.

    `targets` is config training.<method>.targets: all, last, or auto (all for models of at
    most AUTO_ALL_PAIRS_MAX_LAYERS layers, last beyond)."""
    last_only = METHODS[method].last_only or targets == "last"
    if targets == "auto":
        last_only = last_only or num_layers > AUTO_ALL_PAIRS_MAX_LAYERS
    return [num_layers] if last_only else list(range(source + 1, num_layers + 1))
