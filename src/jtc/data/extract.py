"""Hidden-state extraction: one drawn token position per sentence, states h_0..h_L there.

h_0 is the input of the first block, h_l the output of block l, read with forward hooks; h_L
is therefore taken before the model's final norm. Causal models see the sentence cut after the
drawn position (identical states, less compute); masked LMs see the whole sentence with the
drawn token replaced by the mask token.
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


def draw_position(seed: int, sentence_id: int, candidates: np.ndarray) -> int:
    """A uniform draw over `candidates` from a generator keyed by (seed, sentence id)."""
    rng = np.random.default_rng([seed, sentence_id])
    return int(candidates[rng.integers(len(candidates))])


@dataclass
class Prepared:
    """Model inputs for the selected sentences (one drawn position each)."""

    sentence_ids: np.ndarray  # (n,)
    inputs: list[np.ndarray]  # token ids fed to the model (cut or masked)
    positions: np.ndarray  # drawn position
    token_ids: np.ndarray  # original token at the drawn position
    gold_ids: np.ndarray  # next token (causal; -1 at the end) or the masked original
    n_tokens: np.ndarray  # sentence length in tokens after truncation
    skipped: int


def prepare_inputs(
    tokenizer,
    texts: list[str],
    sentence_ids: np.ndarray,
    task: str,
    seed: int,
    max_tokens: int,
    mask_token_id: int | None,
) -> Prepared:
    """Tokenise, truncate to `max_tokens`, draw a position among non-special tokens, and cut
    (causal) or mask (masked LM). Sentences with no ordinary token are skipped and counted."""
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
    keep, inputs, positions, token_ids, gold_ids, n_tokens = [], [], [], [], [], []
    for i, (ids, special) in enumerate(
        zip(enc["input_ids"], enc["special_tokens_mask"], strict=True)
    ):
        ids = np.asarray(ids, dtype=np.int64)
        cand = np.flatnonzero(np.asarray(special) == 0)
        if len(cand) == 0:
            continue
        pos = draw_position(seed, int(sentence_ids[i]), cand)
        if task == "causal":
            model_input = ids[: pos + 1]
            nxt = pos + 1
            gold = int(ids[nxt]) if nxt < len(ids) and special[nxt] == 0 else -1
        else:
            model_input = ids.copy()
            model_input[pos] = mask_token_id
            gold = int(ids[pos])
        keep.append(i)
        inputs.append(model_input)
        positions.append(pos)
        token_ids.append(int(ids[pos]))
        gold_ids.append(gold)
        n_tokens.append(len(ids))
    return Prepared(
        sentence_ids=np.asarray(sentence_ids)[keep].astype(np.int64),
        inputs=inputs,
        positions=np.asarray(positions, dtype=np.int32),
        token_ids=np.asarray(token_ids, dtype=np.int64),
        gold_ids=np.asarray(gold_ids, dtype=np.int64),
        n_tokens=np.asarray(n_tokens, dtype=np.int32),
        skipped=len(texts) - len(keep),
    )


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def padded_batches(
    inputs: list[np.ndarray], batch_size: int, pad_id: int
) -> Iterator[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
    """(rows, token ids, attention mask) of batches of sequences of similar length, padded on
    the right; rows index `inputs`."""
    order = np.argsort([len(x) for x in inputs], kind="stable")
    for start in range(0, len(inputs), batch_size):
        rows = order[start : start + batch_size]
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
) -> np.ndarray:
    """States (sites, n, d) at `positions` for the token sequences `inputs`, batched by length.

    The sites are the recorder's (default: h_0..h_L); `before_batch(rows)` is called before
    each batch runs."""
    blocks = adapter.blocks(model)
    backbone = adapter.backbone(model)
    recorder = recorder or StateRecorder(blocks)
    n, width = len(inputs), model.config.hidden_size
    out = np.empty((len(recorder.states), n, width), dtype=np.float32)
    device = _device(model)
    try:
        with torch.inference_mode():
            for rows, ids, mask in padded_batches(inputs, batch_size, pad_id):
                recorder.index = (
                    torch.arange(len(rows), device=device),
                    torch.as_tensor(positions[rows], device=device, dtype=torch.long),
                )
                if before_batch is not None:
                    before_batch(rows)
                backbone(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)
                for site, state in enumerate(recorder.states):
                    out[site, rows] = state.cpu().numpy()
                if progress is not None:
                    progress.update(len(rows))
    finally:
        recorder.remove()
    return out


def prepare_sentences(
    tokenizer, info: dict, sentences: pa.Table, seed: int, max_tokens: int
) -> tuple[Prepared, int]:
    """The model inputs of a sentence table as extraction builds them, and the token limit."""
    limit = min(max_tokens, info["max_positions"] or max_tokens)
    prepared = prepare_inputs(
        tokenizer,
        sentences.column("text").to_pylist(),
        sentences.column("sentence_id").to_numpy(),
        adapter_of(info).task,
        seed,
        limit,
        info.get("mask_token_id"),
    )
    if prepared.skipped:
        log.warning("skipped %d sentences with no ordinary token", prepared.skipped)
    return prepared, limit


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
) -> dict:
    """Write layer_000..layer_L Parquet files (or, with `parts`, the input and output of every
    block part: block_001.attn.in.parquet, ...), positions.parquet and info.json into `out_dir`."""
    prepared, limit = prepare_sentences(tokenizer, info, sentences, seed, max_tokens)
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
    chunk = max(1, min(CHUNK_SENTENCES, CHUNK_BYTES // (n_sites * width * 4)))
    pad_id = pad_token_id(tokenizer)
    writers = [StateWriter(path, width, dtype, rows_per_group) for path in files]
    n = len(prepared.inputs)
    progress = Progress(n, "extract", "sentences")
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        blocks = adapter.blocks(model)
        states = run_states(
            model,
            adapter,
            prepared.inputs[start:stop],
            prepared.positions[start:stop],
            batch_size,
            pad_id,
            progress,
            PartRecorder(blocks, adapter.parts) if parts else StateRecorder(blocks),
        )
        for site, writer in enumerate(writers):
            writer.write(
                prepared.sentence_ids[start:stop], prepared.positions[start:stop], states[site]
            )
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
        "sentences": n,
        "skipped": prepared.skipped,
        "tokens_run": int(sum(len(x) for x in prepared.inputs)),
        "storage_dtype": dtype,
        **({"parts": {p.name: [p.input_path, p.output] for p in adapter.parts}} if parts else {}),
        "seed": seed,
        "max_tokens": limit,
    }
    write_json(out_dir / "info.json", summary)
    return summary
