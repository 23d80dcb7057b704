"""Stages of workflow/rules/pruning.smk, depth pruning with linear shortcuts: fit every span's
maps and selection statistics on calibration sentences, run every span on evaluation sentences,
tabulate and plot the runs, and write a pruned model."""

from __future__ import annotations


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
    held_out: int | None,
    batch_size: int,
    max_tokens: int,
    threads: int,
    device_map: str | None = None,
) -> None:
    """One pass over every token of the calibration text (windows of running text outside the
    documents of the first `held_out` validation sentences, or the first calibration_sentences
    training sentences: jtc.pruning.windows) sums what every span needs; from those sums,
    each variant's map for every span (`maps_out`), the span's statistics (`calibration_out`)
    and the span each selection rule chooses for each length (`selection_out`)
    (jtc.pruning.calibrate)."""
    from jtc.files.io import read_table, write_table
    from jtc.logs import ready
    from jtc.model.cache import load_model
    from jtc.model.manifest import model_fingerprint
    from jtc.pruning.calibrate import calibrate
    from jtc.pruning.map_file import save_span_maps
    from jtc.settings import CalibrationSettings

    net, tokenizer, info = load_model(model_dir, threads, device_map)
    ready()
    done = calibrate(
        net,
        tokenizer,
        info,
        read_table(sentences),
        CalibrationSettings.of(settings),
        model=model,
        corpus=corpus,
        batch_size=batch_size,
        max_tokens=max_tokens,
        fingerprint=model_fingerprint(model_dir),
        held_out=held_out,
    )
    save_span_maps(maps_out, done.fits, done.metadata)
    write_table(done.calibration, calibration_out)
    write_table(done.selection, selection_out)


def run_pruned(
    model_dir: str,
    sentences: str,
    maps: str,
    selection: str,
    out: str,
    selected_out: str,
    *,
    model: str,
    corpus: str,
    settings: dict,
    batch_size: int,
    max_tokens: int,
    threads: int,
    device_map: str | None = None,
) -> None:
    """Every span of every variant removed in turn from the model on the first
    `evaluation_sentences` validation sentences (`out`), and the blocks each selection rule
    chose on the first `selected_sentences` (`selected_out`), every token scored against the
    unpruned model (jtc.pruning.runs.run_spans)."""
    from jtc.files.io import read_table, write_table
    from jtc.logs import ready
    from jtc.model.cache import load_model
    from jtc.model.head import load_decoder_head
    from jtc.pruning.runs import run_spans
    from jtc.settings import SpanRunSettings

    net, tokenizer, info = load_model(model_dir, threads, device_map)
    # a model spread over GPUs (device_map) may hold its head across devices: read it whole
    head = load_decoder_head(model_dir, model, threads, None if device_map else net)
    ready()
    sweep, chosen = run_spans(
        net,
        tokenizer,
        info,
        head,
        read_table(sentences),
        maps,
        read_table(selection),
        SpanRunSettings.of(settings),
        corpus=corpus,
        batch_size=batch_size,
        max_tokens=max_tokens,
    )
    write_table(sweep, out)
    write_table(chosen, selected_out)


def pruning_tables(
    runs: str,
    selected_runs: str,
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
    """The span table (every variant, length and start, from the sweep's `runs`) and the
    selected table (every length, selection rule and variant, from `selected_runs`), with
    paired bootstrap intervals over sentences."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.pruning.tables import run_scores, selected_table, span_table
    from jtc.report.pages import write_table_with_page
    from jtc.settings import IntervalSettings

    ready()
    intervals = IntervalSettings.of(settings)
    sweep = run_scores(read_table(runs), intervals, seed)
    chosen = run_scores(read_table(selected_runs), intervals, seed)
    names = {"model": model, "corpus": corpus}
    write_table_with_page(span_table(sweep, read_table(calibration), **names), spans_out)
    write_table_with_page(selected_table(chosen, read_table(selection), **names), selected_out)


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
    """The pruned model as a Hugging Face folder (jtc.pruning.checkpoint.export): the span of
    `export_length` blocks (None: of the lengths `selection` has, the configured ones, the
    closest to a quarter of the depth) that `export_selection` chose for `export_variant`
    (jtc.pruning.spans.exported_span)."""
    import logging

    import torch

    from jtc.files.io import read_json, read_table
    from jtc.logs import ready
    from jtc.pruning.checkpoint import export
    from jtc.pruning.spans import exported_caveat, exported_span
    from jtc.settings import ExportSettings

    torch.set_num_threads(threads)
    config = ExportSettings.of(settings)
    ready()
    num_layers = read_json(f"{model_dir}/info.json")["num_layers"]
    chosen = read_table(selection).to_pylist()
    start, n = exported_span(chosen, num_layers, config, model)
    caveat = exported_caveat(chosen, start, n, config)
    if caveat:
        logging.getLogger("jtc").warning("%s: %s", model, caveat)
    export(
        model_dir,
        out,
        start=start,
        length=n,
        variant=config.export_variant,
        maps=maps,
        caveat=caveat,
    )
