"""Stages of workflow/rules/prediction.smk: every method's prediction from every layer, scored
against the model's own; the summary table, its figure and worked examples."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def fit_shortlist(
    model_dir: str, train_dir: str, out: str, *, model: str, rank: int, threads: int
) -> None:
    """The rank-`rank` factorisation of the head's unembedding that the shortlist exit check
    uses (jtc.evaluation.shortlist), weighted by the head's features of the training split's
    last-layer states."""
    import numpy as np

    from jtc.data.states import read_states
    from jtc.evaluation.decode import features_in_chunks
    from jtc.evaluation.shortlist import fit_factors, save_factors
    from jtc.files.io import read_json
    from jtc.logs import ready
    from jtc.model.head import load_decoder_head

    head = load_decoder_head(model_dir, model, threads)
    ready()
    last = read_json(f"{train_dir}/info.json")["num_layers"]
    _, states = read_states(train_dir, last, np.float32)
    factors = fit_factors(head.weight, features_in_chunks(head, states), rank)
    save_factors(out, factors, {"model": model, "fitted_on": "training h_L", "rows": len(states)})
    width = head.weight.shape[1]
    log.info("rank %d of width %d, from %d training positions", factors.rank, width, len(states))


def decode_predictions(
    model_dir: str,
    val_dir: str,
    maps: dict[str, str | None],
    outs: dict[str, str],
    *,
    model: str,
    top_k: int,
    threads: int,
    shortlist: str | None = None,
    candidates: int = 0,
) -> None:
    """Per-position scores (jtc.model.scoring.SCORE_COLUMNS) of every method at every layer of
    the validation split (`maps`: each method's map file, None for id), into outs[method]; with a
    `shortlist` factorisation, also the shortlist check's on `candidates` tokens
    (jtc.model.scoring.SHORTLIST_COLUMNS). The head, the final prediction and each layer's
    states are read once for all methods (jtc.evaluation.layer_scores)."""
    from jtc.evaluation.layer_scores import layer_scores
    from jtc.evaluation.shortlist import Shortlist, load_factors
    from jtc.files.io import write_tables
    from jtc.logs import ready
    from jtc.model.head import load_decoder_head

    head = load_decoder_head(model_dir, model, threads)
    check = Shortlist(head, load_factors(shortlist), candidates) if shortlist else None
    ready()
    write_tables(layer_scores(head, val_dir, maps, list(outs), top_k, check), outs)


def prediction_table(
    score_files: dict[str, str],
    out: str,
    *,
    model: str,
    corpus: str,
    settings: dict,
    seed: int,
) -> None:
    """Precision@k, Surprisal, KL and cross-entropy by method and layer, with bootstrap
    intervals (jtc.evaluation.prediction.prediction_summary), and its CSV copy."""
    from jtc.evaluation.prediction import prediction_summary
    from jtc.files.io import read_tables
    from jtc.logs import ready
    from jtc.report.pages import write_table_with_page
    from jtc.settings import IntervalSettings

    ready()
    table = prediction_summary(
        read_tables(score_files),
        model=model,
        corpus=corpus,
        settings=IntervalSettings.of(settings),
        seed=seed,
    )
    write_table_with_page(table, out)


def plot_prediction(table: str, png: str, pdf: str, *, model: str, corpus: str) -> None:
    """The prediction metrics by layer, one line per method."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.report.figures.prediction import prediction_figure

    ready()
    prediction_figure(read_table(table), f"{model} on {corpus}", png, pdf)


def prediction_examples(
    model_dir: str,
    val_dir: str,
    sentences: str,
    maps: dict[str, str | None],
    out: str,
    markdown: str,
    page: str,
    *,
    model: str,
    corpus: str,
    settings: dict,
    threads: int,
) -> None:
    """A few validation sentences with the model's top-5 and each method's top-5 per layer
    (jtc.report.examples.example_predictions): a table (`out`, and CSV), Markdown and the same
    as an HTML page (`page`). `settings`: config prediction's examples and example_layers."""
    import numpy as np

    from jtc.data.states import read_aligned, read_positions
    from jtc.files.io import atomic_path, read_json, read_table, write_table
    from jtc.logs import ready
    from jtc.model.head import load_decoder_head
    from jtc.report import examples
    from jtc.report.pages import markdown_page
    from jtc.settings import ExampleSettings

    settings = ExampleSettings.of(settings)
    count = settings.examples

    head = load_decoder_head(model_dir, model, threads)
    tokenizer = examples.load_tokenizer(model_dir)
    model_info = read_json(f"{model_dir}/info.json")
    ready()
    positions, info = read_positions(val_dir)
    all_ids = positions.column("sentence_id").to_numpy()
    table = read_table(sentences, ["sentence_id", "text"])
    texts = dict(
        zip(table.column("sentence_id").to_pylist(), table.column("text").to_pylist(), strict=True)
    )

    def layer_states(layer: int) -> np.ndarray:
        return read_aligned(val_dir, layer, all_ids, np.float32)[:count]

    table = examples.example_predictions(
        head,
        tokenizer,
        positions.slice(0, count),  # the first: the validation split is in seeded random order
        texts,
        layer_states,
        maps,
        split=info,
        layers=list(settings.example_layers),
        mask_token_id=model_info.get("mask_token_id"),
    )
    write_table(table, out, csv=True)
    text = examples.examples_markdown(table, f"{model} on {corpus}", info["task"]) + "\n"
    with atomic_path(markdown) as tmp:
        tmp.write_text(text)
    with atomic_path(page) as tmp:  # the same, as the report shows it
        tmp.write_text(markdown_page(text, f"example predictions: {model} on {corpus}"))
