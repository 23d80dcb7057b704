"""The depth-pruning variants: what stands in for a removed span of blocks, one record each
(docs/method.md, "Depth pruning"; docs/extending.md says how to add one). Every stage that
treats variants differently asks this registry, never a name: which calibration sums a fit
needs, how it is fitted, how it stands in for the span (in the span runs and in a pruned model
in memory), whether and how it is exported, which settings it reads. Plain Python, no torch, so
that the workflow reads it while it plans; a variant's fit is named by "module:function" and
imported by the calibration (jtc.pruning.calibrate.fit_function).

Blocks are numbered 1..L; h_l is the residual stream after block l (h_0: the embeddings), X_i
block i's feed-forward output before its residual add and r_i = h_i - X_i. A span (start i,
length n) removes blocks i+1..i+n and the variant computes the state that stands in for
h_{i+n} from h_i (and X_i).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

# how a stand-in computes h_{i+n} from its map M (STAND_INS)
STAND_INS = {
    "state": "h_i itself (no map)",
    "map": "M(h_i)",
    "difference": "h_i + M(h_i)",
    "ffn": "r_i + M(X_i): M acts on block i's feed-forward output (start i >= 1)",
}
# the calibration sums a fit can ask for (jtc.pruning.spans.StatisticsPlan, jtc.pruning.sums):
SUMS = {
    "state_gram": "Σ h_iᵀh_i",
    "state_cross": "Σ h_iᵀh_{i+n}",
    "ffn": "Σ X_iᵀX_i, Σ X_iᵀh_i and Σ X_iᵀh_{i+n}",
    "magnitude": "Σ|h_i| and Σ|h_{i+n}| per channel",
    "hadamard_magnitude": "Σ|h_i H| and Σ|h_{i+n} H| per channel, H an orthonormal Hadamard "
    "matrix (jtc.pruning.hadamard)",
}
# where an exported variant folds a part of its map (jtc.pruning.checkpoint):
FOLD_SITES = {
    "mlp": "block i's last feed-forward linear layer (X_i becomes X_i M; jtc.pruning.mlp_fold)",
    "stream": "the embeddings and blocks 1..i, a scaled rotation s·Q of a pre-norm RMSNorm "
    "model's residual stream (jtc.pruning.rotate)",
}
# the map part that holds a rotation applied after the stand-in (rotation_replaceme's (s·Q)ᵀ);
# a map's other parts are jtc.shortcuts.maps.PARTS
ROTATION_PART = "rotation"


@dataclass(frozen=True)
class Variant:
    """One stand-in for a span of blocks.

    `fit` names the function that fits it ("module:function"). Fitted on the calibration sums
    (`fitted_on` "sums"): fit(grams, start, length, rank, ridge) -> SpanFit, from the sums
    `sums` names. Fitted on the calibration tokens' rows (`fitted_on` "rows", one more pass
    over the calibration sentences): fit(net, adapter, inputs, grams, spans, settings,
    batch_size, pad_id) -> [SpanFit], every span at once.

    `stand_in` says how it computes h_{i+n} (STAND_INS) from its map's parts
    (jtc.shortcuts.maps.ShortcutMap); with `rotated`, the map part ROTATION_PART, a scaled
    rotation, is applied after it.

    `folds` says how it is exported as a standard checkpoint, {part: site} (FOLD_SITES; {}:
    the blocks are removed and nothing is folded); None: it is measured in memory only, and
    `not_exported` says why. `settings` are the keys of config pruning its fit reads.
    `interpolates`: whether its map, fitted on fewer calibration tokens than the width,
    reproduces them (a fit of the tokens with at least d free parameters per output: its
    calibration loss then says nothing of the span, jtc.pruning.fits.underdetermined_fit);
    False for a map that is no such fit (the magnitude ratios of jtc.pruning.compensation)."""

    name: str
    formula: str  # h_{i+n} := ...
    summary: str
    fit: str
    stand_in: str
    fitted_on: str = "sums"
    sums: frozenset[str] = frozenset()
    rotated: bool = False
    folds: dict[str, str] | None = field(default_factory=dict)
    not_exported: str = ""
    settings: tuple[str, ...] = ()
    interpolates: bool = True

    @property
    def has_map(self) -> bool:
        """Whether it has a map (in the span maps file): every variant but drop."""
        return self.stand_in != "state" or self.rotated

    @property
    def reads_ffn(self) -> bool:
        """Whether it reads block i's feed-forward output X_i: its start is then at least 1,
        and the model's blocks must have a feed-forward output that a transform folds into
        (jtc.pruning.ffn_site)."""
        return self.stand_in == "ffn"

    @property
    def first_start(self) -> int:
        """The first start i it can use (block 0, the embeddings, has no feed-forward
        output)."""
        return 1 if self.reads_ffn else 0

    @property
    def exported(self) -> bool:
        return self.folds is not None

    def folded_part(self, site: str) -> str | None:
        """The part of its map folded into `site` (FOLD_SITES) when exported, else None."""
        return next((p for p, s in (self.folds or {}).items() if s == site), None)


def _problems(variant: Variant) -> list[str]:
    """What is inconsistent in a record (checked when the registry is built)."""
    problems = []
    if variant.stand_in not in STAND_INS:
        problems.append(f"stand_in '{variant.stand_in}' is not one of {', '.join(STAND_INS)}")
    if variant.fitted_on not in ("sums", "rows"):
        problems.append(f"fitted_on '{variant.fitted_on}' is not sums or rows")
    if not variant.sums <= set(SUMS):
        problems.append(f"sums {sorted(variant.sums - set(SUMS))} are not of {', '.join(SUMS)}")
    if variant.reads_ffn and "ffn" not in variant.sums:
        problems.append("it reads X_i, so its sums must include ffn")
    if variant.reads_ffn and variant.folded_part("mlp") != "weight":
        # a pruned model in memory folds X_i T as the export does (jtc.pruning.pruned)
        problems.append("a map of X_i (stand_in ffn) folds its weight into the MLP (mlp)")
    if variant.rotated and not variant.reads_ffn:
        problems.append("a rotation after the stand-in is applied to r_i + X_i T (stand_in ffn)")
    if variant.folds is None and not variant.not_exported:
        problems.append("a variant that is not exported says why (not_exported)")
    for site in (variant.folds or {}).values():
        if site not in FOLD_SITES:
            problems.append(f"fold site '{site}' is not one of {', '.join(FOLD_SITES)}")
        if site == "mlp" and not variant.reads_ffn:
            problems.append("only a map of X_i (stand_in ffn) folds into the feed-forward layer")
    if variant.folds is not None and variant.has_map:
        unfolded = {"weight", *([ROTATION_PART] if variant.rotated else [])} - set(variant.folds)
        if unfolded or variant.stand_in == "difference":
            problems.append(f"an exported map must fold every part (not folded: {unfolded})")
    return problems


def registry(variants: Iterable[Variant]) -> dict[str, Variant]:
    """{name: variant}, in the given order (tables and figures list them so); a ValueError
    naming every inconsistent record."""
    found = {v.name: v for v in variants}
    problems = [f"pruning variant '{v.name}': {p}" for v in found.values() for p in _problems(v)]
    if problems:
        raise ValueError("; ".join(problems))
    return found


FITS = "jtc.pruning.fits"
COMPENSATION = "jtc.pruning.compensation"
# why a map of the residual stream is not exported
ON_THE_STREAM = (
    "it acts on the residual stream, which no weight of a pre-norm block owns: measured in memory "
    "only"
)
VARIANTS: dict[str, Variant] = registry(
    [
        Variant(
            "drop",
            "h_{i+n} := h_i",
            "the blocks removed, nothing in their place (ShortGPT, UIDL)",
            fit=f"{FITS}:fit_drop",
            stand_in="state",
        ),
        Variant(
            "mat",
            "h_{i+n} := h_i A",
            "least squares without intercept between the states (jtc's map; Ghosted Layers' "
            "h_i(I + M) at ridge 0, M the least squares of h_{i+n} - h_i on h_i)",
            fit=f"{FITS}:fit_mat",
            stand_in="map",
            sums=frozenset({"state_gram", "state_cross"}),
            folds=None,
            not_exported=ON_THE_STREAM,
            settings=("ridge",),
        ),
        Variant(
            "replaceme",
            "h_{i+n} := r_i + X_i T",
            "ReplaceMe: T by least squares, folded into block i's last feed-forward layer",
            fit=f"{FITS}:fit_replaceme",
            stand_in="ffn",
            sums=frozenset({"ffn"}),
            folds={"weight": "mlp"},
            settings=("ridge",),
        ),
        Variant(
            "low_rank",
            "h_{i+n} := h_i + h_i B C",
            "the identity plus a rank-r map of the difference h_{i+n} - h_i (reduced-rank "
            "regression; never worse than drop; at full rank with a ridge, Ghosted Layers' "
            "ridged h_i(I + M))",
            fit=f"{FITS}:fit_low_rank",
            stand_in="difference",
            sums=frozenset({"state_gram", "state_cross"}),
            folds=None,
            not_exported=ON_THE_STREAM,
            settings=("rank", "ridge"),
        ),
        Variant(
            "rotation",
            "h_{i+n} := s·h_i Q",
            "the scaled orthogonal Procrustes fit, folded into the embeddings and blocks 1..i",
            fit=f"{FITS}:fit_rotation",
            stand_in="map",
            sums=frozenset({"state_cross"}),
            folds={"weight": "stream"},
        ),
        Variant(
            "rotation_replaceme",
            "h_{i+n} := s·(r_i + X_i T) Q",
            "ReplaceMe's T and the rotation together, their joint least squares in closed form",
            fit=f"{FITS}:fit_rotation_replaceme",
            stand_in="ffn",
            rotated=True,
            sums=frozenset({"state_cross", "ffn"}),
            folds={"weight": "mlp", ROTATION_PART: "stream"},
            settings=("ridge",),
        ),
        Variant(
            "replaceme_cosine",
            "h_{i+n} := r_i + X_i T",
            "ReplaceMe's T fitted by Adam on the mean cosine distance (its second objective), "
            "from the least-squares T",
            fit="jtc.pruning.cosine:cosine_fits",
            stand_in="ffn",
            fitted_on="rows",
            sums=frozenset({"ffn"}),
            folds={"weight": "mlp"},
            settings=("ridge", "cosine"),
        ),
        Variant(
            "prune_comp",
            "h_{i+n} := s·h_i",
            "Prune&Comp's magnitude compensation: s the mean over channels of mean |h_{i+n}| / "
            "mean |h_i|, folded into the embeddings and blocks 1..i (rotation with Q = I)",
            fit=f"{COMPENSATION}:fit_prune_comp",
            stand_in="map",
            sums=frozenset({"magnitude"}),
            interpolates=False,
            folds={"weight": "stream"},
        ),
        Variant(
            "prune_comp_channel",
            "h_{i+n} := h_i diag(c)",
            "Prune&Comp's compensation per channel: c_k = mean |h_{i+n,k}| / mean |h_{i,k}|",
            fit=f"{COMPENSATION}:fit_prune_comp_channel",
            stand_in="map",
            sums=frozenset({"magnitude", "state_gram", "state_cross"}),
            interpolates=False,
            folds=None,
            not_exported=(
                "a per-channel scale of the residual stream does not commute with RMSNorm (it "
                "divides by the norm over every channel), so it folds into no weight of the "
                "blocks before the span: measured in memory only"
            ),
        ),
        Variant(
            "linear_patch",
            "h_{i+n} := h_i H D Hᵀ",
            "LinearPatch without its distillation: D_kk = mean |(h_{i+n} H)_k| / mean "
            "|(h_i H)_k|, H an orthonormal Hadamard matrix",
            fit=f"{COMPENSATION}:fit_linear_patch",
            stand_in="map",
            sums=frozenset({"hadamard_magnitude", "state_gram", "state_cross"}),
            interpolates=False,
            folds=None,
            not_exported=(
                "its patch H D Hᵀ is no scaled rotation, so it does not commute with RMSNorm and "
                "folds into no weight of the blocks before the span (LinearPatch applies it by "
                "a hook too): measured in memory only"
            ),
        ),
    ]
)
# the variants a pruned checkpoint can be written for (jtc prune --variant, pruning.export_variant)
EXPORTED = tuple(name for name, v in VARIANTS.items() if v.exported)
# variants no longer offered: why, and what to list instead
RETIRED = {
    "rrr": (
        "rrr (a rank-r map h_i -> h_{i+n} that threw the residual stream away) was replaced by "
        "low_rank (identity plus low rank of the difference: h_{i+n} := h_i + h_i B C, never "
        "worse than drop on the calibration tokens); list low_rank instead"
    ),
}


def variant_of(name: str) -> Variant:
    """The record of `name`; a ValueError naming the known variants (and, for a retired one,
    what replaced it)."""
    if name in VARIANTS:
        return VARIANTS[name]
    if name in RETIRED:
        raise ValueError(RETIRED[name])
    raise ValueError(f"unknown pruning variant '{name}'; known: {', '.join(VARIANTS)}")


def with_map(names: Iterable[str]) -> list[str]:
    """Those of `names` that have a map."""
    return [n for n in names if variant_of(n).has_map]
