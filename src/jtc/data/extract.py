"""Hidden-state extraction: drawn token positions of each sentence (one by default, k, or
all), states h_0..h_L there.

h_0 is the input of the first block, h_l the output of block l, read with forward hooks; h_L
is therefore taken before the model's final norm. Causal models see the sentence cut after the
last drawn position (identical states, less compute), once for all its positions; masked LMs
see the whole sentence with the drawn token replaced by the mask token, once per position.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from jtc.data.positions import ALL, draw_position, draw_positions  # noqa: F401 (re-exported)
from jtc.data.states import StateWriter, layer_file, part_file
from jtc.files.io import write_json, write_table
from jtc.logs import Progress
from jtc.model.adapters import Adapter, adapter_of, part_adapter
from jtc.model.hooks import PartRecorder, Recorder, StateRecorder, part_sites

log = logging.getLogger(__name__)

CHUNK_SENTENCES = 2048  # sentences whose states are held in memory at once (at most)
CHUNK_BYTES = 1 << 30  # and at most this much float32 state, all sites together
STATE_BUFFER_BYTES = 512 << 20  # states buffered for writing, all layers together
ROW_GROUP_BYTES = 64 << 20  # largest Parquet row group


@dataclass
class Prepared:
    """Model inputs for the selected sentences, and their rows: one row per (sentence, drawn
    position), in sentence order, positions increasing within a sentence. A causal model reads
    one input per sentence (cut after its last drawn position: the states at earlier positions
    are the same); a masked LM one input per row (that row's token masked)."""

    sentence_ids: np.ndarray  # (rows,)
    inputs: list[np.ndarray]  # token ids fed to the model (cut or masked)
    positions: np.ndarray  # (rows,) drawn position
    token_ids: np.ndarray  # (rows,) original token at the drawn position
    gold_ids: np.ndarray  # (rows,) next token (causal; -1 at the end) or the masked original
    n_tokens: np.ndarray  # (rows,) sentence length in tokens after truncation
    skipped: int
    input_of: np.ndarray  # (rows,) the input each row is read from (non-decreasing)

    def input_rows(self, start: int, stop: int) -> slice:
        """The rows read from inputs start..stop-1 (contiguous: input_of is non-decreasing)."""
        first, last = np.searchsorted(self.input_of, [start, stop])
        return slice(int(first), int(last))


def prepare_inputs(
    tokenizer,
    texts: list[str],
    sentence_ids: np.ndarray,
    task: str,
    seed: int,
    max_tokens: int,
    mask_token_id: int | None,
    positions: int | str = 1,
) -> Prepared:
    """Tokenise, truncate to `max_tokens`, draw `positions` positions per sentence among its
    non-special tokens (draw_positions), and cut (causal) or mask (masked LM). Sentences with no
    ordinary token are skipped and counted."""
    if task == "masked" and mask_token_id is None:
        raise ValueError("masked-token extraction needs a tokenizer with a mask token")
    enc = tokenizer(
        texts,
        add_special_tokens=True,
        truncation=True,
        max_length=max_tokens,
        return_special_tokens_mask=True,
        return_attention_mask=False,
    )
    kept, inputs, drawn, token_ids, gold_ids, n_tokens, input_of = [], [], [], [], [], [], []
    for i, (ids, special) in enumerate(
        zip(enc["input_ids"], enc["special_tokens_mask"], strict=True)
    ):
        ids = np.asarray(ids, dtype=np.int64)
        special = np.asarray(special)
        cand = np.flatnonzero(special == 0)
        if len(cand) == 0:
            continue
        chosen = draw_positions(seed, int(sentence_ids[i]), cand, positions)
        if task == "causal":
            input_of.extend([len(inputs)] * len(chosen))
            inputs.append(ids[: chosen[-1] + 1])
            nxt = chosen + 1
            ordinary = (nxt < len(ids)) & (special[np.minimum(nxt, len(ids) - 1)] == 0)
            gold_ids.extend(np.where(ordinary, ids[np.minimum(nxt, len(ids) - 1)], -1))
        else:
            for pos in chosen:
                input_of.append(len(inputs))
                masked = ids.copy()
                masked[pos] = mask_token_id
                inputs.append(masked)
            gold_ids.extend(ids[chosen])
        kept.extend([i] * len(chosen))
        drawn.extend(chosen)
        token_ids.extend(ids[chosen])
        n_tokens.extend([len(ids)] * len(chosen))
    return Prepared(
        sentence_ids=np.asarray(sentence_ids, dtype=np.int64)[kept],
        inputs=inputs,
        positions=np.asarray(drawn, dtype=np.int32),
        token_ids=np.asarray(token_ids, dtype=np.int64),
        gold_ids=np.asarray(gold_ids, dtype=np.int64),
        n_tokens=np.asarray(n_tokens, dtype=np.int32),
        skipped=len(texts) - len(set(kept)),
        input_of=np.asarray(input_of, dtype=np.int64),
    )


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def padded_batches(
    inputs: list[np.ndarray], batch_size: int, pad_id: int, slack: float | None = None
) -> Iterator[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
    """(rows, token ids, attention mask) of batches of sequences of similar length, padded on
    the right; rows index `inputs`. With `slack`, a batch also ends before its padded positions
    would exceed (1 + slack) times its tokens (for jobs that run every position many times)."""
    lengths = np.array([len(x) for x in inputs])
    order = np.argsort(lengths, kind="stable")
    start = 0
    while start < len(order):
        stop = min(start + batch_size, len(order))
        if slack is not None:  # lengths increase: the last one sets the padded length
            candidate = lengths[order[start:stop]]
            tokens = np.cumsum(candidate)
            padded = candidate * np.arange(1, stop - start + 1)
            fits = padded <= (1 + slack) * tokens  # the first one always fits
            stop = start + (len(fits) if fits.all() else int(np.argmin(fits)))
        rows = order[start:stop]
        start = stop
        length = max(len(inputs[r]) for r in rows)
        ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), length), dtype=torch.long)
        for j, r in enumerate(rows):
            ids[j, : len(inputs[r])] = torch.from_numpy(inputs[r])
            mask[j, : len(inputs[r])] = 1
        yield rows, ids, mask


def run_states(
    model: nn.Module,
    adapter: Adapter,
    inputs: list[np.ndarray],
    positions: np.ndarray,
    batch_size: int,
    pad_id: int,
    progress: Progress | None = None,
    recorder: Recorder | None = None,
    before_batch: Callable[[np.ndarray], None] | None = None,
    input_of: np.ndarray | None = None,
) -> np.ndarray:
    """States (sites, rows, d) at `positions` for the token sequences `inputs`, batched by
    length: row r is read at positions[r] of inputs[input_of[r]] (`input_of` non-decreasing;
    None: one row per input, in order).

    The sites are the recorder's (default: h_0..h_L); `before_batch(inputs)` is called with the
    input numbers of each batch before it runs."""
    blocks = adapter.blocks(model)
    backbone = adapter.backbone(model)
    recorder = recorder or StateRecorder(blocks)
    if input_of is None:
        input_of = np.arange(len(inputs))
    first = np.searchsorted(input_of, np.arange(len(inputs) + 1))  # each input's first row
    out = np.empty((len(recorder.states), len(input_of), model.config.hidden_size), np.float32)
    device = _device(model)
    try:
        with torch.inference_mode():
            for batch, ids, mask in padded_batches(inputs, batch_size, pad_id):
                counts = first[batch + 1] - first[batch]
                rows = np.concatenate([np.arange(first[i], first[i + 1]) for i in batch])
                recorder.index = (
                    torch.as_tensor(np.repeat(np.arange(len(batch)), counts), device=device),
                    torch.as_tensor(positions[rows], device=device, dtype=torch.long),
                )
                if before_batch is not None:
                    before_batch(batch)
                backbone(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)
                for site, state in enumerate(recorder.states):
                    out[site, rows] = state.cpu().numpy()
                if progress is not None:
                    progress.update(len(batch))
    finally:
        recorder.remove()
    return out


def prepare_sentences(
    tokenizer,
    info: dict,
    sentences: pa.Table,
    seed: int,
    max_tokens: int,
    positions: int | str = 1,
) -> tuple[Prepared, int]:
    """The model inputs of a sentence table as extraction builds them (`positions` per
    sentence), and the token limit."""
    limit = min(max_tokens, info["max_positions"] or max_tokens)
    prepared = prepare_inputs(
        tokenizer,
        sentences.column("text").to_pylist(),
        sentences.column("sentence_id").to_numpy(),
        adapter_of(info).task,
        seed,
        limit,
        info.get("mask_token_id"),
        positions,
    )
    if prepared.skipped:
        log.warning("skipped %d sentences with no ordinary token", prepared.skipped)
    return prepared, limit


def input_chunks(prepared: Prepared, max_inputs: int, max_rows: int) -> Iterator[tuple[int, int]]:
    """(start, stop) ranges of inputs run at once: at most `max_inputs` inputs and, unless one
    input alone has more, at most `max_rows` rows."""
    n = len(prepared.inputs)
    first = np.searchsorted(prepared.input_of, np.arange(n + 1))  # each input's first row
    start = 0
    while start < n:
        fits = int(np.searchsorted(first, first[start] + max_rows, side="right")) - 1
        stop = max(start + 1, min(fits, start + max_inputs, n))
        yield start, stop
        start = stop


def pad_token_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


def extract(
    model: nn.Module,
    tokenizer,
    info: dict,
    sentences: pa.Table,
    out_dir: Path,
    *,
    seed: int,
    batch_size: int,
    max_tokens: int,
    dtype: str,
    meta: dict | None = None,
    parts: bool = False,
    positions: int | str = 1,
) -> dict:
    """Write layer_000..layer_L Parquet files (or, with `parts`, the input and output of every
    block part: block_001.attn.in.parquet, ...), positions.parquet and info.json into `out_dir`:
    a row per (sentence, drawn position), `positions` of them per sentence (draw_positions)."""
    prepared, limit = prepare_sentences(tokenizer, info, sentences, seed, max_tokens, positions)
    if parts:
        adapter = part_adapter(adapter_of(info))
        sites = part_sites(info["num_layers"], adapter.parts)
        files = [part_file(out_dir, *site) for site in sites]
    else:
        adapter = adapter_of(info)
        files = [layer_file(out_dir, layer) for layer in range(info["num_layers"] + 1)]
    n_sites = len(files)
    width = info["hidden_size"]
    itemsize = 2 if dtype == "float16" else 4
    row_bytes = width * itemsize
    rows_per_group = max(256, min(ROW_GROUP_BYTES, STATE_BUFFER_BYTES // n_sites) // row_bytes)
    max_rows = max(1, CHUNK_BYTES // (n_sites * width * 4))
    pad_id = pad_token_id(tokenizer)
    writers = [StateWriter(path, width, dtype, rows_per_group) for path in files]
    sentences = len(np.unique(prepared.sentence_ids))
    n = len(prepared.inputs)  # a sentence each, but for a masked LM's several positions
    progress = Progress(n, "extract", "sentences" if n == sentences else "inputs")
    for start, stop in input_chunks(prepared, CHUNK_SENTENCES, max_rows):
        rows = prepared.input_rows(start, stop)
        blocks = adapter.blocks(model)
        states = run_states(
            model,
            adapter,
            prepared.inputs[start:stop],
            prepared.positions[rows],
            batch_size,
            pad_id,
            progress,
            PartRecorder(blocks, adapter.parts) if parts else StateRecorder(blocks),
            input_of=prepared.input_of[rows] - start,
        )
        for site, writer in enumerate(writers):
            writer.write(prepared.sentence_ids[rows], prepared.positions[rows], states[site])
    for writer in writers:
        writer.close()
    write_table(
        pa.table(
            {
                "sentence_id": prepared.sentence_ids,
                "position": prepared.positions,
                "token_id": prepared.token_ids,
                "gold_id": prepared.gold_ids,
                "n_tokens": prepared.n_tokens,
            }
        ),
        out_dir / "positions.parquet",
    )
    summary = {
        **(meta or {}),
        "task": adapter.task,
        "num_layers": info["num_layers"],
        "hidden_size": width,
        "sentences": sentences,
        "rows": len(prepared.sentence_ids),
        "positions_per_sentence": positions,
        "skipped": prepared.skipped,
        "tokens_run": int(sum(len(x) for x in prepared.inputs)),
        "storage_dtype": dtype,
        **({"parts": {p.name: [p.input_path, p.output] for p in adapter.parts}} if parts else {}),
        "seed": seed,
        "max_tokens": limit,
    }
    write_json(out_dir / "info.json", summary)
    return summary
