"""The shortcut methods: what each needs and which layer pairs it fits (torch-free, for planning).

Every method but id stores its maps the same way (jtc.shortcuts.maps), one file per model, corpus
and method, so the stages that use maps need no method-specific code. Only the fitting differs:
mat and rrr are solved in closed form (jtc.shortcuts.closed_form; `trained` false: rule
fit_map, one job per (model, corpus) for both), the others are trained (`trained` true: rule
train_map, one job per (model, corpus, method)): from the training states alone by
jtc.shortcuts.fit.fit_method (jtc.shortcuts.train), through the model's head by
jtc.shortcuts.lens.fit_tuned_lens (`needs_head`). A method's config block training.<method> is
read through its settings object (jtc.settings: LowRankSettings, RankSettings or TrainSettings),
defaults from the schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jtc.settings import LowRankSettings, RankSettings, Settings, TrainSettings

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
    # the object of its config block training.<name>; None: no block (id, mat)
    settings: type[Settings] | None = None


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("id", "the identity (logit lens)"),
        Method("mat", "least-squares d × d map, no intercept (JTC)"),
        Method(
            "njtc", "rank-r product A·B by gradient descent on MSE", True, settings=LowRankSettings
        ),
        Method(
            "rrr",
            "reduced-rank regression: the closed-form optimum of NJTC's objective (rank as NJTC)",
            settings=RankSettings,  # unset: NJTC's (jtc.pipeline.config)
        ),
        Method(
            "nnjtc",
            "batch normalisation, then a rank-r product A·B (N-NJTC)",
            True,
            settings=LowRankSettings,
        ),
        Method(
            "one_jump",
            "one batch-normalised rank-r map A·B from every layer into the last, trained on the "
            "pooled pairs of all layers (ours, after OJFA)",
            True,
            last_only=True,
            one_map="pooled",
            settings=LowRankSettings,
        ),
        Method(
            "one_jump_selected",
            "one of N-NJTC's per-layer maps into the last, used from every layer: the one whose "
            "predictions from all layers have the highest mean cosine similarity to the last "
            "layer's states (ours, after OJFA's selection)",
            True,
            last_only=True,
            one_map="selected",
            settings=LowRankSettings,
        ),
        Method(
            "tuned_lens",
            "affine translator h + W h + b into the last layer, trained by KL to the model's "
            "final prediction",
            True,
            needs_head=True,
            last_only=True,
            settings=TrainSettings,
        ),
    )
}


def settings_param(config: Mapping[str, Any], method: str) -> dict[str, Any]:
    """A rule's param for `method`: the keys of config training.<method> that its settings
    object reads ({} for a method without one)."""
    kind = METHODS[method].settings
    return kind.param(config, method) if kind else {}


def settings_of(method: str, param: Mapping[str, Any]) -> Settings | None:
    """`method`'s settings object of its param (settings_param); None for a method without one."""
    kind = METHODS[method].settings
    return kind.of(param) if kind else None


def applicable(method: str, predicts: bool) -> bool:
    """Whether a method can be fitted for a model (the tuned lens needs a decoder head)."""
    return predicts or not METHODS[method].needs_head


def default_rank(width: int) -> int:
    """NJTC's rank: floor(d / 100), at least 1."""
    return max(1, width // 100)


def rank_of(settings: RankSettings, width: int) -> int:
    """A low-rank method's rank: config training.<method>.rank, or default_rank(d)."""
    return settings.rank or default_rank(width)


def fitted_targets(method: str, targets: str, source: int, num_layers: int) -> list[int]:
    """The target layers a method fits from `source`: every later layer, or the last only.

    `targets` is config training.<method>.targets: all, last, or auto (all for models of at
    most AUTO_ALL_PAIRS_MAX_LAYERS layers, last beyond)."""
    last_only = METHODS[method].last_only or targets == "last"
    if targets == "auto":
        last_only = last_only or num_layers > AUTO_ALL_PAIRS_MAX_LAYERS
    return [num_layers] if last_only else list(range(source + 1, num_layers + 1))
