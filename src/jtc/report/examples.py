"""Readable examples: for a few validation sentences, the model's own top-5 next (or masked)
tokens beside each method's top-5 read from early layers, decoded to text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

EXAMPLE_COLUMNS = {
    "sentence_id": pa.int64(),
    "context": pa.string(),
    "gold": pa.string(),
    "method": pa.string(),
    "layer": pa.int32(),
    "rank": pa.int32(),
    "token_id": pa.int64(),
    "token": pa.string(),
    "probability": pa.float64(),
}
DEFAULT_LAYER_FRACTIONS = (1 / 6, 1 / 3, 1 / 2, 2 / 3)
FINAL = "model"  # the method name of the model's own prediction in the examples table


def example_layers(requested: list[int], num_layers: int) -> list[int]:
    """The layers to show: as configured, or a spread over the depth when none are given."""
    if requested:
        bad = [layer for layer in requested if not 0 <= layer < num_layers]
        if bad:
            raise ValueError(f"example layers {bad} are outside 0..{num_layers - 1}")
        return sorted(set(requested))
    return sorted({min(num_layers - 1, round(f * num_layers)) for f in DEFAULT_LAYER_FRACTIONS})


def load_tokenizer(model_dir: str | Path):
    """A cached model's tokenizer from its tokenizer.json and tokenizer_config.json alone
    (transformers' tokenizers backend), which imports no model code: a job that only shows
    examples then needs neither transformers' modelling modules nor the model's config class
    (about 2 CPU-s). `contexts` checks that it tokenises as extraction did. A folder without
    tokenizer.json gets AutoTokenizer."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if (Path(model_dir) / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(model_dir)
    return AutoTokenizer.from_pretrained(model_dir)


def token_text(tokenizer, token_id: int) -> str:
    text = tokenizer.decode([int(token_id)])
    return text.strip() or repr(text)


def contexts(
    tokenizer,
    texts: list[str],
    sentence_ids: np.ndarray,
    positions: np.ndarray,
    *,
    task: str,
    seed: int,
    max_tokens: int,
    mask_token_id: int | None,
) -> list[str]:
    """What the model saw for each sentence: the prefix up to the drawn token (causal) or the
    sentence with [MASK] at the drawn position (masked), re-made exactly as extraction made it."""
    from jtc.data.extract import prepare_inputs  # torch: not needed by the workflow while it plans

    prepared = prepare_inputs(tokenizer, texts, sentence_ids, task, seed, max_tokens, mask_token_id)
    if not np.array_equal(prepared.sentence_ids, sentence_ids) or not np.array_equal(
        prepared.positions, positions
    ):
        raise ValueError("the sentences no longer tokenise as they did at extraction")
    special = set(tokenizer.all_special_ids) - {mask_token_id}
    return [
        tokenizer.decode([int(t) for t in ids if int(t) not in special]).strip()
        for ids in prepared.inputs
    ]


def examples_table(
    sentence_ids: np.ndarray,
    context: list[str],
    gold: list[str],
    predictions: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]],
    decode_token: Callable[[int], str],
) -> pa.Table:
    """Long table: one row per (sentence, method, layer, rank). `predictions` maps
    (method, layer) to (ids, probabilities), each (n_sentences, k)."""
    data: dict[str, list] = {c: [] for c in EXAMPLE_COLUMNS}
    for row, sid in enumerate(sentence_ids):
        for (method, layer), (ids, probs) in predictions.items():
            for rank, (tok, prob) in enumerate(zip(ids[row], probs[row], strict=True), 1):
                values = (
                    sid,
                    context[row],
                    gold[row],
                    method,
                    layer,
                    rank,
                    tok,
                    decode_token(tok),
                    prob,
                )
                for column, value in zip(EXAMPLE_COLUMNS, values, strict=True):
                    data[column].append(value)
    return pa.table({c: pa.array(data[c], t) for c, t in EXAMPLE_COLUMNS.items()})


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def examples_markdown(table: pa.Table, title: str, task: str) -> str:
    """One small table per sentence: rows are the model and each method at each layer."""
    rows = table.to_pylist()
    what = "next token" if task == "causal" else "masked token"
    lines = [f"# {title}", "", f"Top-5 {what} predictions (probability in brackets).", ""]
    for sid in dict.fromkeys(r["sentence_id"] for r in rows):
        mine = [r for r in rows if r["sentence_id"] == sid]
        k = max(r["rank"] for r in mine)
        lines += [
            f"## Sentence {sid}",
            "",
            f"Context: {_cell(mine[0]['context'])}  ",
            f"Gold {what}: {_cell(mine[0]['gold'])}",
            "",
            "| prediction | " + " | ".join(str(i) for i in range(1, k + 1)) + " |",
            "|---" * (k + 1) + "|",
        ]
        for method, layer in dict.fromkeys((r["method"], r["layer"]) for r in mine):
            cells = [
                f"{_cell(r['token'])} ({r['probability']:.2f})"
                for r in mine
                if r["method"] == method and r["layer"] == layer
            ]
            label = f"{method}, layer {layer}"
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
