"""Depth pruning's evaluation runs (torch), what run_pruned computes: every span of every variant,
and the blocks each selection rule chose, removed in turn from the model, every token of the
evaluation sentences scored against the unpruned model.

Forward hooks only. A batch runs once unmodified, which gives h_0..h_L and every block's
feed-forward output X_l at every position (jtc.pruning.sums.every_state); a span (i, n) then
runs only blocks i+n+1..L, from the stand-in for h_{i+n} that its variant computes from h_i
(and X_i). Memory: every evaluation sentence's (2L + 1) × tokens × d float32 states on the CPU,
one map and one chunk of logits.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from jtc.data.extract import pad_token_id, padded_batches
from jtc.files.io import rows_table
from jtc.logs import Progress
from jtc.model.adapters import Adapter, adapter_of
from jtc.model.head import Head
from jtc.model.hooks import hidden_output, substitute_input
from jtc.model.kept_blocks import running_only
from jtc.model.scoring import Reference, final_reference, score
from jtc.pruning.inputs import every_token
from jtc.pruning.map_file import load_stand_in
from jtc.pruning.pruned import stand_in_module, stand_in_state
from jtc.pruning.spans import parse_removed, removed_label, resolved_lengths, spans
from jtc.pruning.sums import every_state
from jtc.pruning.variants import variant_of
from jtc.settings import SpanRunSettings
from jtc.shortcuts.maps import ShortcutMap

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpanRun:
    """One evaluation run: the `removed` blocks (1-based) taken out; a span (start >= 0,
    blocks start+1..start+length) with its variant standing in for them, or blocks that are
    not consecutive (start -1), dropped."""

    variant: str
    start: int
    length: int
    removed: tuple[int, ...]

    @classmethod
    def span(cls, variant: str, start: int, length: int) -> SpanRun:
        return cls(variant, start, length, tuple(range(start + 1, start + length + 1)))


def stand_in(
    run: SpanRun,
    linear: nn.Module | None,
    states: Sequence[torch.Tensor],
    ffn: Sequence[torch.Tensor | None],
    device: torch.device,
) -> torch.Tensor:
    """The state that replaces h_{i+n} in a span run, on `device`, from the unmodified h_i
    (and X_i); `linear` is the run's map as a torch module there (None: drop)."""
    h = states[run.start].to(device)
    x = ffn[run.start - 1].to(device) if variant_of(run.variant).reads_ffn else None
    return stand_in_state(run.variant, linear, h, x)


@contextmanager
def _running(
    model: nn.Module, adapter: Adapter, kept: Sequence[int], first_input: torch.Tensor | None
) -> Iterator[dict]:
    """The backbone runs only the blocks `kept` (0-based), in order, the first of them on
    `first_input` (None: on what comes before it, the embeddings), with the config's per-layer
    settings (layer_types) of those blocks; the last one's output is kept (`["final"]`)."""
    out: dict[str, torch.Tensor] = {}

    def last(module, args, output):
        out["final"] = hidden_output(output).float()

    with running_only(model, adapter, kept) as modules:
        handles = [modules[-1].register_forward_hook(last)]
        if first_input is not None:
            hook = substitute_input(lambda: first_input)
            handles.append(modules[0].register_forward_pre_hook(hook, with_kwargs=True))
        try:
            yield out
        finally:
            for handle in handles:
                handle.remove()


# every batch runs ~200 times: batches end before padding adds more than this share of positions
# (SmolLM2, 200 runs, one thread: 8 news sentences took 92 s in one batch, 77 s in batches of 4;
# 24 sentences 318 s in one batch of 24, 264 s with this bound)
PADDING_SLACK = 0.25

RUN_COLUMNS = {
    "variant": pa.string(),
    "start": pa.int64(),  # -1: blocks not consecutive
    "length": pa.int64(),
    "removed": pa.string(),  # blocks removed, 1-based ("13-20" or "5,9,14")
    "sentence_id": pa.int64(),
    "tokens": pa.int64(),  # positions scored (those with a next token)
    "cross_entropy": pa.float64(),  # summed over the sentence's scored positions, nats
    "cross_entropy_full": pa.float64(),  # the unpruned model's, same positions
    "kl": pa.float64(),  # Σ KL(unpruned || pruned)
    "agreement": pa.int64(),  # positions where the top-1 tokens agree
    "overflowed": pa.int64(),  # positions whose logits were not finite (left out of the sums)
}


def _final_states(
    model: nn.Module,
    adapter: Adapter,
    run: SpanRun,
    linear: nn.Module | None,
    states: Sequence[torch.Tensor],
    ffn: Sequence[torch.Tensor | None],
    call: Callable[[], object],
    device: torch.device,
) -> torch.Tensor:
    """h_L at every position of the batch with the run's blocks removed and its stand-in."""
    blocks = adapter.blocks(model)
    removed = set(run.removed)
    if run.start < 0:  # not consecutive: the other blocks run from the embeddings
        kept = [b for b in range(len(blocks)) if b + 1 not in removed]
        first = None
    else:
        kept = list(range(run.start + run.length, len(blocks)))
        first = stand_in(run, linear, states, ffn, device)
        if not kept:  # the span ends at the last block
            return first
    with _running(model, adapter, kept, first) as out:
        call()
    return out["final"]


@dataclass
class _Batch:
    """A batch of evaluation sentences after its unmodified pass: h_0..h_L and X_1..X_L at
    every position (on the CPU), the positions scored and the unpruned model's prediction."""

    ids: torch.Tensor
    mask: torch.Tensor
    states: list[torch.Tensor]
    ffn: list[torch.Tensor | None]
    scored: torch.Tensor  # (B, T) positions whose next token is in the input
    gold: np.ndarray  # the next token of each scored position
    owner: np.ndarray  # the input of each scored position
    reference: Reference
    full_cross_entropy: np.ndarray


def _unmodified(
    model: nn.Module,
    adapter: Adapter,
    head: Head,
    rows: np.ndarray,
    ids: torch.Tensor,
    mask: torch.Tensor,
    ffn: bool,
) -> _Batch:
    device = next(model.parameters()).device
    with every_state(model, adapter, ffn) as kept:
        adapter.backbone(model)(
            input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False
        )
    states = [x.cpu() for x in kept["states"]]
    ffn_out = [None if x is None else x.cpu() for x in kept["ffn"]]
    scored = mask.bool().clone()
    scored[:, :-1] &= mask[:, 1:].bool()
    scored[:, -1] = False
    gold = ids[:, 1:][scored[:, :-1]].numpy()
    final = states[-1][scored].numpy()
    reference = final_reference(head, final, 1)
    return _Batch(
        ids=ids,
        mask=mask,
        states=states,
        ffn=ffn_out,
        scored=scored,
        gold=gold,
        owner=rows[torch.nonzero(scored)[:, 0].numpy()],
        reference=reference,
        full_cross_entropy=score(head, reference, final, gold)["cross_entropy"],
    )


@torch.inference_mode()
def span_scores(
    model: nn.Module,
    adapter: Adapter,
    head: Head,
    inputs: list[np.ndarray],
    sentence_ids: np.ndarray,
    runs: Sequence[SpanRun],
    maps: Callable[[SpanRun], tuple[ShortcutMap | None, np.ndarray | None]],
    batch_size: int,
    pad_id: int,
) -> pa.Table:
    """Every run on the sentences `inputs` (token ids), scored at every position that has a
    next token against the unpruned model: per (run, sentence) the sums of RUN_COLUMNS.
    `maps(run)` gives a run's map (None for drop) and rotation_replaceme's rotation
    (jtc.pruning.map_file.load_stand_in), read when the run starts. Memory: every
    sentence's states (2L + 1 per position, float32, on the CPU) and one map at a time."""
    backbone = adapter.backbone(model)
    device = next(model.parameters()).device
    ffn = any(variant_of(r.variant).reads_ffn for r in runs)
    started = time.perf_counter()
    batches = [
        _unmodified(model, adapter, head, rows, ids, mask, ffn)
        for rows, ids, mask in padded_batches(inputs, batch_size, pad_id, slack=PADDING_SLACK)
    ]
    log.info("unmodified pass: %.1f s", time.perf_counter() - started)
    sums = np.zeros((len(runs), len(inputs), 5))  # tokens, ce, ce_full, kl, agreement
    overflowed = np.zeros((len(runs), len(inputs)), dtype=np.int64)
    progress = Progress(len(runs), "pruned runs", "runs")
    for r, run in enumerate(runs):
        linear = stand_in_module(*maps(run), device=device)
        for batch in batches:
            call = functools.partial(
                backbone,
                input_ids=batch.ids.to(device),
                attention_mask=batch.mask.to(device),
                use_cache=False,
            )
            final = _final_states(
                model, adapter, run, linear, batch.states, batch.ffn, call, device
            )
            got = score(
                head, batch.reference, final[batch.scored.to(device)].cpu().numpy(), batch.gold
            )
            finite = got["top1_id"] >= 0
            values = np.stack(
                [
                    finite,
                    np.where(finite, got["cross_entropy"], 0.0),
                    np.where(finite, batch.full_cross_entropy, 0.0),
                    np.where(finite, got["kl"], 0.0),
                    finite & (got["final_rank"] == 1),
                ],
                axis=1,
            )
            np.add.at(sums[r], batch.owner, values)
            np.add.at(overflowed[r], batch.owner, ~finite)
        progress.update(1)
    log.info(
        "%d runs on %d sentences: %.1f s", len(runs), len(inputs), time.perf_counter() - started
    )
    table = []
    for r, run in enumerate(runs):
        if overflowed[r].any():
            log.warning(
                "%s, blocks %s: %d positions overflowed (inf or NaN): left out of the sums",
                run.variant,
                removed_label(run.removed),
                int(overflowed[r].sum()),
            )
        for s, sentence in enumerate(sentence_ids):
            tokens, ce, ce_full, kl, agreement = sums[r, s]
            table.append(
                {
                    "variant": run.variant,
                    "start": run.start,
                    "length": run.length,
                    "removed": removed_label(run.removed),
                    "sentence_id": int(sentence),
                    "tokens": int(tokens),
                    "cross_entropy": ce,
                    "cross_entropy_full": ce_full,
                    "kl": kl,
                    "agreement": int(agreement),
                    "overflowed": int(overflowed[r, s]),
                }
            )
    return rows_table(table, RUN_COLUMNS)


def span_runs(num_layers: int, settings: SpanRunSettings) -> list[SpanRun]:
    """Every span of every variant (the sweep the span table reads)."""
    lengths = resolved_lengths(settings.lengths, num_layers)
    return [
        SpanRun.span(variant, start, n)
        for variant in settings.variants
        for start, n in spans(num_layers, lengths, variant)
    ]


def selected_runs(selection: pa.Table) -> list[SpanRun]:
    """The blocks each selection rule chose, each set once per variant (several rules may
    choose the same), in the order of the `selection` table (selection.parquet): a span with
    its variant, or blocks that are not consecutive (start -1), dropped."""
    runs: dict[tuple[str, str], SpanRun] = {}
    for row in selection.to_pylist():
        if row["start"] < 0:
            run = SpanRun(row["variant"], -1, row["length"], parse_removed(row["removed"]))
        else:
            run = SpanRun.span(row["variant"], row["start"], row["length"])
        runs.setdefault((run.variant, removed_label(run.removed)), run)
    return list(runs.values())


def run_spans(
    model: nn.Module,
    tokenizer,
    info: dict,
    head: Head,
    sentences: pa.Table,
    maps: str | Path,
    selection: pa.Table,
    settings: SpanRunSettings,
    *,
    corpus: str,
    batch_size: int,
    max_tokens: int,
) -> tuple[pa.Table, pa.Table]:
    """(sweep, selected): the span_runs on every token of the first `evaluation_sentences`
    validation sentences of the corpus table `sentences`, and the selected_runs on the first
    `selected_sentences` (span_scores); each span's map read from the maps file `maps`
    (jtc.pruning.map_file) when its run starts."""

    def span_map(run: SpanRun) -> tuple[ShortcutMap | None, np.ndarray | None]:
        """The run's map (None for drop) and rotation (rotation_replaceme's, else None)."""
        return load_stand_in(maps, run.variant, run.start, run.length)

    adapter, pad_id = adapter_of(info), pad_token_id(tokenizer)
    done = []
    for runs, count, key in (
        (
            span_runs(info["num_layers"], settings),
            settings.evaluation_sentences,
            "pruning.evaluation_sentences",
        ),
        (selected_runs(selection), settings.selected_sentences, "pruning.selected_sentences"),
    ):
        inputs, ids = every_token(
            tokenizer, info, sentences, "validation", count, corpus, max_tokens, key
        )
        done.append(
            span_scores(model, adapter, head, inputs, ids, runs, span_map, batch_size, pad_id)
        )
    return done[0], done[1]
