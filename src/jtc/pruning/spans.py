"""Which spans of blocks depth pruning removes (docs/method.md, "Depth pruning"): their lengths
and starts, the blocks they remove, what a model must be to be pruned, and which calibration
sums their fits need. Plain Python, so that the workflow can read it while it plans.

Blocks are numbered 1..L; a span (start i, length n) removes blocks i+1..i+n.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jtc.model.adapters import Adapter, UnsupportedArchitecture
from jtc.pruning.ffn_site import replaceme_ffn
from jtc.pruning.variants import VARIANTS, variant_of
from jtc.settings import CalibrationText, ExportSettings

# how a span is chosen for each length, on calibration sentences only
SELECTIONS = ("angular_distance", "block_influence", "measured", "lowest_block_influence")
# lowest_block_influence removes the n blocks of lowest Block Influence, not necessarily
# consecutive: only dropping them is defined
NONCONTIGUOUS = "lowest_block_influence"


def share_of_depth(share: str, num_layers: int) -> int:
    """The blocks a share of the depth ("1/4") stands for: rounded, at least one."""
    numerator, denominator = (int(part) for part in share.split("/"))
    return max(1, round(num_layers * numerator / denominator))


def default_lengths(num_layers: int) -> list[int]:
    """About 1/8 and 1/4 of the depth (rounded, at least one block, fewer than all)."""
    lengths = {share_of_depth("1/8", num_layers), share_of_depth("1/4", num_layers)}
    return sorted(n for n in lengths if n < num_layers)


def resolved_lengths(lengths: Sequence[int | str], num_layers: int) -> list[int]:
    """The configured lengths (config pruning.lengths: block counts, or shares of the depth
    such as "1/4", 8 of SmolLM2's 30 blocks and 6 of Qwen2.5 0.5B's 24), or the default ones
    when empty."""
    counts = {n if isinstance(n, int) else share_of_depth(n, num_layers) for n in lengths}
    return sorted(counts) or default_lengths(num_layers)


def export_length(lengths: Iterable[int], num_layers: int) -> int:
    """The length closest to a quarter of the depth (the shorter on a tie)."""
    return min(sorted(lengths), key=lambda n: abs(n - num_layers / 4))


def chosen_start(
    selection: Iterable[Mapping[str, Any]], length: int, variant: str, rule: str
) -> int | None:
    """The start `rule` chose for `variant` at `length`, from the rows of a selection table
    (selection.parquet); None where it has no such row."""
    for row in selection:
        if (row["length"], row["variant"], row["selection"]) == (length, variant, rule):
            return int(row["start"])
    return None


def exported_span(
    selection: Sequence[Mapping[str, Any]], num_layers: int, settings: ExportSettings, model: str
) -> tuple[int, int]:
    """(start, length) of the span the workflow exports for `model` (of `num_layers` blocks):
    of `export_length` blocks (None: of the lengths the selection table's rows have, the one
    closest to a quarter of the depth), the one `export_selection` chose for `export_variant`."""
    n = settings.export_length or export_length({r["length"] for r in selection}, num_layers)
    start = chosen_start(selection, n, settings.export_variant, settings.export_selection)
    if start is None:
        raise ValueError(
            f"config key 'pruning.export_variant': no {settings.export_variant} span of {n} "
            f"blocks was chosen by {settings.export_selection} for model '{model}'; "
            "export_variant must be one of pruning.variants and export_length one of "
            "pruning.lengths"
        )
    return start, n


def exported_caveat(
    selection: Sequence[Mapping[str, Any]], start: int, length: int, settings: ExportSettings
) -> str | None:
    """What the exported span's choice is worth, from its selection row (None: nothing to say,
    or a selection table from before the `underdetermined` and `tied` columns): its map fitted
    on fewer calibration tokens than the width, and a choice a tie decided."""
    row = next(
        (
            r
            for r in selection
            if (r["length"], r["variant"], r["selection"], r["start"])
            == (length, settings.export_variant, settings.export_selection, start)
        ),
        None,
    )
    if row is None:
        return None
    notes = []
    if row.get("underdetermined"):
        notes.append(
            f"its {settings.export_variant} map was fitted on {row['calibration_tokens']} "
            "calibration tokens, fewer than the width: underdetermined, it reproduces them and "
            f"is fitted to noise; {CalibrationText.MORE_TEXT}"
        )
    if (row.get("tied") or 1) > 1:
        notes.append(
            f"{settings.export_selection} tied across {row['tied']} spans (blocks "
            f"{row['tied_removed']}), broken by the smallest angular distance"
        )
    if not notes:
        return None
    removed = removed_label(range(start + 1, start + length + 1))
    return f"the exported span (blocks {removed}) is doubtful: " + "; ".join(notes)


def spans(num_layers: int, lengths: Iterable[int], variant: str) -> list[tuple[int, int]]:
    """Every (start, length) of a variant: first_start <= i (1 for a variant that reads block
    i's feed-forward output, jtc.pruning.variants), i + n <= L."""
    first = variant_of(variant).first_start
    return [(start, n) for n in sorted(set(lengths)) for start in range(first, num_layers - n + 1)]


def lengths_problem(num_layers: int, lengths: Sequence[int]) -> str | None:
    """Why the configured lengths cannot be pruned from a model of `num_layers` blocks."""
    for n in lengths:
        if n >= num_layers:
            return (
                f"config key 'pruning.lengths': {n} blocks cannot be removed from a model of "
                f"{num_layers} blocks (at most {num_layers - 1})"
            )
    return None


def pruning_problem(
    name: str,
    task: str | None,
    adapter: Adapter | None,
    num_layers: int | None,
    lengths: Sequence[int | str],
    variants: Sequence[str],
) -> str | None:
    """Why a model cannot be pruned as configured, from what is known of it (None: unknown):
    a masked LM (every token is scored on the next one), blocks whose feed-forward output a
    variant that reads it cannot use (jtc.pruning.ffn_site), lengths it does not have."""
    if task == "masked":
        return (
            f"config key 'pruning.models': model '{name}' is a masked LM; depth pruning scores "
            "every token's next-token prediction, which needs a causal LM"
        )
    folded = [v for v in variants if variant_of(v).reads_ffn]
    if adapter is not None and folded:
        try:
            replaceme_ffn(adapter)
        except UnsupportedArchitecture as err:
            others = " or ".join(n for n, v in VARIANTS.items() if not v.reads_ffn)
            return (
                f"config key 'pruning.variants': {', '.join(folded)} folds a transform into "
                f"each block's feed-forward module (its output X added to the stream, h_i = r_i "
                f"+ X), and model '{name}': {err}; list {others} instead"
            )
    if not num_layers:
        return None
    return lengths_problem(num_layers, resolved_lengths(lengths, num_layers))


def removed_label(blocks: Iterable[int]) -> str:
    """The removed blocks (1-based) as text: "13-20" when consecutive, else "5,9,14"."""
    blocks = sorted(blocks)
    if len(blocks) > 1 and blocks == list(range(blocks[0], blocks[-1] + 1)):
        return f"{blocks[0]}-{blocks[-1]}"
    return ",".join(str(b) for b in blocks)


def parse_removed(label: str) -> tuple[int, ...]:
    """The blocks of a removed_label."""
    if "-" in label:
        first, last = label.split("-")
        return tuple(range(int(first), int(last) + 1))
    return tuple(int(b) for b in label.split(","))


# the states a calibration batch holds at most (jtc.pruning.sums): a batch of 2,048-token
# windows of the default batch size would hold 28 GB on SmolLM2, 62 GB at 1.5B
SUMS_BATCH_BYTES = 2 * 1024**3


def sums_batch_bytes(tokens: int, num_layers: int, width: int) -> int:
    """The states one sequence of `tokens` tokens holds while the sums are taken: h_0..h_L and
    every block's MLP output in float32 as captured, h_0..h_L again in float64 as summed."""
    return tokens * width * ((num_layers + 1) * (4 + 8) + num_layers * 4)


def sums_batch(batch_size: int, tokens: int, num_layers: int, width: int) -> int:
    """Sequences of at most `tokens` tokens a calibration batch takes: `batch_size`, fewer
    where their states would pass SUMS_BATCH_BYTES, at least one."""
    fits = SUMS_BATCH_BYTES // max(sums_batch_bytes(tokens, num_layers, width), 1)
    return max(1, min(batch_size, fits))


@dataclass(frozen=True)
class StatisticsPlan:
    """Which sums a set of spans and variants needs (what SpanGrams holds)."""

    pairs: tuple[tuple[int, int], ...]  # (i, j) with scalar sums: every span, every block
    state_sources: tuple[int, ...]  # i with Σ h_iᵀh_i (sums "state_gram")
    state_pairs: tuple[tuple[int, int], ...]  # (i, i+n) with Σ h_iᵀh_{i+n} ("state_cross")
    ffn_blocks: tuple[int, ...]  # i with Σ X_iᵀX_i and Σ X_iᵀh_i ("ffn")
    ffn_pairs: tuple[tuple[int, int], ...]  # (i, i+n) with Σ X_iᵀh_{i+n}
    magnitude_states: tuple[int, ...] = ()  # l with Σ|h_l| per channel ("magnitude")
    hadamard_states: tuple[int, ...] = ()  # l with Σ|h_l H| per channel ("hadamard_magnitude")

    @classmethod
    def of(cls, num_layers: int, lengths: Sequence[int], variants: Sequence[str]) -> StatisticsPlan:
        """The sums the fits of `variants` ask for (jtc.pruning.variants: Variant.sums); the
        scalar sums of every span of every registered variant, and of every block."""
        blocks = {(b - 1, b) for b in range(1, num_layers + 1)}  # Block Influence
        every = {(i, i + n) for v in VARIANTS for i, n in spans(num_layers, lengths, v)}

        def asking(sum_name: str) -> set[tuple[int, int]]:
            """The spans (i, i + n) of the variants whose fits ask for `sum_name`."""
            return {
                (i, i + n)
                for v in variants
                if sum_name in variant_of(v).sums
                for i, n in spans(num_layers, lengths, v)
            }

        ffn = asking("ffn")

        def ends(sum_name: str) -> tuple[int, ...]:
            return tuple(sorted({layer for pair in asking(sum_name) for layer in pair}))

        return cls(
            pairs=tuple(sorted(blocks | every)),
            state_sources=tuple(sorted({i for i, _ in asking("state_gram")})),
            state_pairs=tuple(sorted(asking("state_cross"))),
            ffn_blocks=tuple(sorted({i for i, _ in ffn})),
            ffn_pairs=tuple(sorted(ffn)),
            magnitude_states=ends("magnitude"),
            hadamard_states=ends("hadamard_magnitude"),
        )

    def matrices(self) -> int:
        """How many d × d float64 matrices the sums hold (memory: this × d² × 8 bytes; the
        Hadamard matrix the "hadamard_magnitude" sums rotate by counts as one)."""
        return (
            len(self.state_sources)
            + len(self.state_pairs)
            + 2 * len(self.ffn_blocks)
            + len(self.ffn_pairs)
            + (1 if self.hadamard_states else 0)
        )
