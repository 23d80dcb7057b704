"""Stages of workflow/rules/pruning.smk, depth pruning with linear shortcuts: fit every span's
maps and selection statistics on calibration sentences, run every span on evaluation sentences,
tabulate and plot the runs, and write a pruned model."""

from __future__ import annotations


def _every_token(tokenizer, info: dict, table, max_tokens: int) -> tuple[list, list]:
    """The token ids of each sentence (truncated to max_tokens), every position used, and the
    sentence ids of those inputs."""
    import numpy as np

    from jtc.data.extract import prepare_sentences

    # positions "all": nothing is drawn, so the seed plays no part
    prepared, _ = prepare_sentences(tokenizer, info, table, 0, max_tokens, positions="all")
    first_rows = np.searchsorted(prepared.input_of, np.arange(len(prepared.inputs)))
    return prepared.inputs, prepared.sentence_ids[first_rows]


def calibrate_pruning(
    model_dir: str,
    sentences: str,
    maps_out: str,
    calibration_out: str,
    selection_out: str,
    *,
    model: str,
    corpus: str,
    settings: dict,
    batch_size: int,
    max_tokens: int,
    threads: int,
    device_map: str | None = None,
) -> None:
    """One pass over every token of the first `calibration_sentences` training sentences sums
    what every span needs (jtc.pruning.runs.span_statistics); from those sums, each
    variant's map for every span (`maps_out`), the span's statistics (`calibration_out`) and
    the span each selection rule chooses for each length (`selection_out`)."""
    import logging

    from jtc.data.corpus import select_split
    from jtc.data.extract import pad_token_id
    from jtc.files.io import read_table, write_table
    from jtc.logs import ready
    from jtc.model.adapters import adapter_of
    from jtc.model.cache import load_model
    from jtc.pruning.fits import fit_span, select_spans
    from jtc.pruning.runs import span_statistics
    from jtc.pruning.spans import StatisticsPlan, pruning_problem, resolved_lengths, spans
    from jtc.pruning.tables import calibration_table, selection_table
    from jtc.settings import CalibrationSettings
    from jtc.shortcuts.maps import SpanMapWriter
    from jtc.shortcuts.methods import default_rank

    log = logging.getLogger(__name__)
    config = CalibrationSettings.of(settings)
    net, tokenizer, info = load_model(model_dir, threads, device_map)
    adapter = adapter_of(info)
    lengths = resolved_lengths(config.lengths, info["num_layers"])
    problem = pruning_problem(
        model, adapter.task, adapter, info["num_layers"], lengths, config.variants
    )
    if problem:
        raise ValueError(problem)
    ready()
    table = select_split(read_table(sentences), "train", config.calibration_sentences, corpus)
    inputs, _ = _every_token(tokenizer, info, table, max_tokens)
    num_layers, width = info["num_layers"], info["hidden_size"]
    plan = StatisticsPlan.of(num_layers, lengths, config.variants)
    log.info(
        "calibration sums: %d d × d float64 matrices, %.2f GB",
        plan.matrices(),
        plan.matrices() * width * width * 8 / 1e9,
    )
    grams = span_statistics(net, adapter, inputs, plan, batch_size, pad_token_id(tokenizer))
    rank = config.rank or default_rank(width)
    fits = [
        fit_span(grams, variant, start, n, rank)
        for variant in config.variants
        for start, n in spans(num_layers, lengths, variant)
    ]
    meta = {"model": model, "corpus": corpus, "calibration_tokens": grams.tokens, "rank": rank}
    with SpanMapWriter(maps_out, meta) as writer:
        for fit in fits:
            if fit.tensors:
                writer.add(fit.variant, fit.start, fit.length, fit.tensors)
    write_table(calibration_table(grams, fits), calibration_out)
    chosen = select_spans(grams, fits, lengths, config.variants)
    write_table(selection_table(chosen, num_layers), selection_out)


def run_pruned(
    model_dir: str,
    sentences: str,
    maps: str,
    selection: str,
    out: str,
    *,
    model: str,
    corpus: str,
    settings: dict,
    batch_size: int,
    max_tokens: int,
    threads: int,
    device_map: str | None = None,
) -> None:
    """Every span of every variant, and the blocks each selection rule chose, removed in turn
    from the model on the first `evaluation_sentences` validation sentences, every token scored
    against the unpruned model (jtc.pruning.runs.span_scores)."""
    from jtc.data.corpus import select_split
    from jtc.data.extract import pad_token_id
    from jtc.files.io import read_table, write_table
    from jtc.logs import ready
    from jtc.model.adapters import adapter_of
    from jtc.model.cache import load_model
    from jtc.model.head import load_decoder_head
    from jtc.pruning.runs import SpanRun, span_scores
    from jtc.pruning.spans import parse_removed, resolved_lengths, spans
    from jtc.settings import SpanRunSettings
    from jtc.shortcuts.maps import ShortcutMap, load_span_map

    config = SpanRunSettings.of(settings)
    net, tokenizer, info = load_model(model_dir, threads, device_map)
    adapter = adapter_of(info)
    head = load_decoder_head(model_dir, model, threads, None if device_map else net)
    ready()
    num_layers = info["num_layers"]
    lengths = resolved_lengths(config.lengths, num_layers)
    runs = [
        SpanRun.span(variant, start, n)
        for variant in config.variants
        for start, n in spans(num_layers, lengths, variant)
    ]
    for row in read_table(selection).to_pylist():
        if row["start"] < 0:  # blocks not consecutive (drop only)
            runs.append(SpanRun("drop", -1, row["length"], parse_removed(row["removed"])))

    def span_map(run: SpanRun) -> ShortcutMap | None:
        """The run's map, read from the file when the run starts (None for drop)."""
        if run.variant == "drop":
            return None
        return load_span_map(maps, run.variant, run.start, run.length)

    table = select_split(read_table(sentences), "validation", config.evaluation_sentences, corpus)
    inputs, ids = _every_token(tokenizer, info, table, max_tokens)
    scores = span_scores(
        net, adapter, head, inputs, ids, runs, span_map, batch_size, pad_token_id(tokenizer)
    )
    write_table(scores, out)


def pruning_tables(
    runs: str,
    calibration: str,
    selection: str,
    spans_out: str,
    selected_out: str,
    *,
    model: str,
    corpus: str,
    settings: dict,
    seed: int,
) -> None:
    """The span table (every variant, length and start) and the selected table (every length,
    selection rule and variant), with paired bootstrap intervals over sentences."""
    from jtc.files.io import read_table, write_table
    from jtc.logs import ready
    from jtc.pruning.tables import run_scores, selected_table, span_table
    from jtc.settings import IntervalSettings

    ready()
    scores = run_scores(read_table(runs), IntervalSettings.of(settings), seed)
    names = {"model": model, "corpus": corpus}
    write_table(span_table(scores, read_table(calibration), **names), spans_out, csv=True)
    write_table(selected_table(scores, read_table(selection), **names), selected_out, csv=True)


def plot_pruning(
    spans: str,
    selected: str,
    spans_png: str,
    spans_pdf: str,
    selected_png: str,
    selected_pdf: str,
    *,
    model: str,
    corpus: str,
) -> None:
    """Perplexity ratio by start and length per variant; and by blocks removed per rule."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.report.figures.pruning import pruning_selection_figure, pruning_span_figure

    ready()
    title = f"{model} on {corpus}"
    pruning_span_figure(read_table(spans), title, spans_png, spans_pdf)
    pruning_selection_figure(read_table(selected), title, selected_png, selected_pdf)


def export_pruned(
    model_dir: str,
    maps: str,
    selection: str,
    out: str,
    *,
    model: str,
    settings: dict,
    threads: int,
) -> None:
    """The pruned model as a Hugging Face folder (jtc.pruning.checkpoint.write_pruned): the
    span of `export_length` blocks (None: of the lengths `selection` has, the configured ones,
    the closest to a quarter of the depth) that `export_selection` chose for `export_variant`."""
    import torch

    from jtc.files.io import read_json, read_table
    from jtc.logs import ready
    from jtc.pruning.checkpoint import read_replaceme_map, write_pruned
    from jtc.pruning.spans import chosen_start, export_length
    from jtc.settings import ExportSettings

    torch.set_num_threads(threads)
    config = ExportSettings.of(settings)
    ready()
    num_layers = read_json(f"{model_dir}/info.json")["num_layers"]
    chosen = read_table(selection).to_pylist()
    n = config.export_length or export_length({r["length"] for r in chosen}, num_layers)
    start = chosen_start(chosen, n, config.export_variant, config.export_selection)
    if start is None:
        raise ValueError(
            f"config key 'pruning.export_variant': no {config.export_variant} span of {n} blocks "
            f"was chosen by {config.export_selection} for model '{model}'; export_variant must be "
            "one of pruning.variants and export_length one of pruning.lengths"
        )
    transform, source = None, None
    if config.export_variant == "replaceme":
        transform = read_replaceme_map(maps, start, n)
        source = f"{maps}: replaceme, start {start}, length {n}"
    write_pruned(
        model_dir,
        out,
        start=start,
        length=n,
        variant=config.export_variant,
        transform=transform,
        transform_source=source,
    )
