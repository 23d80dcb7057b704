"""Readable examples: for a few validation sentences, the model's own top-5 next (or masked)
tokens beside each method's top-5 read from early layers, decoded to text
(`example_predictions`), as a table and as Markdown."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from jtc.model.head import Head

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


def example_predictions(
    head: Head,
    tokenizer,
    chosen: pa.Table,
    texts: Mapping[int, str],
    layer_states: Callable[[int], np.ndarray],
    maps: Mapping[str, str | Path | None],
    *,
    split: Mapping[str, Any],
    layers: list[int],
    mask_token_id: int | None,
) -> pa.Table:
    """The examples table (EXAMPLE_COLUMNS) of the validation positions `chosen` (rows of a
    split's positions.parquet; `split`: its info.json) of the sentences `texts` (by id): what
    the model saw, the gold token, the model's own top-5 and each method's (`maps`: its map
    file, None for id) from each of the example layers. `layer_states(layer)`: the states of
    that layer at the chosen positions."""
    from jtc.evaluation.decode import top_tokens
    from jtc.shortcuts.maps import to_last_layer

    ids = chosen.column("sentence_id").to_numpy()
    last = split["num_layers"]
    context = contexts(
        tokenizer,
        [texts[int(i)] for i in ids],
        ids,
        chosen.column("position").to_numpy(),
        task=split["task"],
        seed=split["seed"],
        max_tokens=split["max_tokens"],
        mask_token_id=mask_token_id,
    )
    gold = [
        token_text(tokenizer, g) if g >= 0 else "(end of sentence)"
        for g in chosen.column("gold_id").to_pylist()
    ]
    predictions = {(FINAL, last): top_tokens(head, layer_states(last), 5)}
    for layer in example_layers(layers, last):
        states = layer_states(layer)
        for method in sorted(maps):
            mapped = to_last_layer(maps[method], layer, states, last)
            predictions[(method, layer)] = top_tokens(head, mapped.astype(np.float32), 5)
    return examples_table(ids, context, gold, predictions, lambda t: token_text(tokenizer, t))


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
