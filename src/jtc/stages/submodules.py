"""Stages of workflow/rules/submodules.smk, linear shortcuts across sub-modules: record every
block part's input and output, fit a map per (block, part) and score it, compute the states
below each jump layer, run the model with parts replaced after it, and tabulate the runs."""

from __future__ import annotations


def record_parts(model_dir: str, sentences: str, out: str, **options) -> None:
    """The input and output of every block part at the positions extract_hidden draws (same
    sentences, same positions), one Parquet file per (block, part, side) (`options`: those of
    jtc.stages.hidden.record_split)."""
    from jtc.stages.hidden import record_split

    record_split(model_dir, sentences, out, parts=True, **options)


def fit_parts(train_dir: str, out: str, *, model: str, corpus: str, threads: int) -> None:
    """A least-squares map from input to output of every part of every block, training split
    (jtc.shortcuts.parts.fit_part_maps, on the GPU when the job has one), written a block at a
    time."""
    from jtc.devices import linalg_device
    from jtc.logs import ready
    from jtc.shortcuts.parts import fit_part_maps

    device = linalg_device()
    ready()
    fit_part_maps(train_dir, out, model=model, corpus=corpus, threads=threads, device=device)


def part_r2_table(val_dir: str, maps: str, out: str, *, model: str, corpus: str) -> None:
    """r² of every (block, part) map on the recorded validation inputs and outputs (on the GPU
    when the job has one), with the rows the maps were fitted on and whether they are fewer
    than the part's input width (`underdetermined`, warned)."""
    from jtc.devices import linalg_device
    from jtc.logs import ready
    from jtc.report.pages import write_table_with_page
    from jtc.shortcuts.maps import load_part_maps
    from jtc.shortcuts.parts import part_r2_table as r2
    from jtc.shortcuts.underdetermined import with_part_training_rows

    ready()
    part_maps = load_part_maps(maps)
    table = r2(val_dir, part_maps, model=model, corpus=corpus, device=linalg_device())
    write_table_with_page(with_part_training_rows(table, maps, part_maps), out)


def plot_part_r2(table: str, png: str, pdf: str, *, model: str, corpus: str) -> None:
    """The block × part r² heatmap."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.report.figures.submodules import part_r2_heatmap

    ready()
    part_r2_heatmap(read_table(table), f"sub-module r² — {model} on {corpus}", png, pdf)


def replace_parts(
    model_dir: str,
    sentences: str,
    val_dir: str,
    maps: str,
    out: str,
    *,
    model: str,
    variants: dict[str, list[str]],
    jumps: list[int],
    count: int | None,
    top_k: int,
    batch_size: int,
    threads: int,
    device_map: str | None = None,
) -> None:
    """The first `count` validation sentences run with the parts of every block after each jump
    layer in `jumps` replaced by their maps, for each variant, and scored against the
    unmodified model's prediction (jtc.shortcuts.replace.replaced_scores): one table into
    `out`, decode_predictions' columns, method = variant, layer = the jump layer. The sentences
    are tokenised again, and must give the stored validation positions
    (jtc.data.retokenise.validation_inputs). The states below the jump layers stay in float32
    whatever storage_dtype says."""
    from jtc.data.extract import pad_token_id
    from jtc.data.retokenise import validation_inputs
    from jtc.files.io import write_table
    from jtc.logs import ready
    from jtc.model.adapters import adapter_of, part_adapter
    from jtc.model.cache import load_model
    from jtc.model.head import load_decoder_head
    from jtc.shortcuts.maps import load_part_maps
    from jtc.shortcuts.replace import replaced_scores

    net, tokenizer, info = load_model(model_dir, threads, device_map)
    adapter = part_adapter(adapter_of(info))
    # a model spread over GPUs (device_map) may hold its head across devices: read it whole
    head = load_decoder_head(model_dir, model, threads, None if device_map else net)
    ready()
    chosen = validation_inputs(val_dir, sentences, tokenizer, info, count)
    table = replaced_scores(
        net,
        adapter,
        head,
        chosen.inputs,
        chosen.final_states,
        chosen.sentence_ids,
        chosen.positions,
        chosen.gold_ids,
        load_part_maps(maps),
        variants=variants,
        jumps=jumps,
        top_k=top_k,
        batch_size=batch_size,
        pad_id=pad_token_id(tokenizer),
    )
    write_table(table, out)


def submodule_table(
    replaced: str,
    prediction_files: dict[str, str],
    out: str,
    *,
    model: str,
    corpus: str,
    settings: dict,
    seed: int,
) -> None:
    """Precision@k, Surprisal, ... by jump layer for every variant, beside the layer shortcuts
    (`prediction_files`: id, mat) on the same validation positions, with paired intervals."""
    from jtc.evaluation.prediction import beside_layer_shortcuts, prediction_summary
    from jtc.files.io import read_table, read_tables
    from jtc.logs import ready
    from jtc.report.pages import write_table_with_page
    from jtc.settings import IntervalSettings

    ready()
    summary = prediction_summary(
        beside_layer_shortcuts(read_table(replaced), read_tables(prediction_files)),
        model=model,
        corpus=corpus,
        settings=IntervalSettings.of(settings),
        seed=seed,
        diverged=True,
    )
    write_table_with_page(summary, out)


def plot_submodules(table: str, png: str, pdf: str, *, model: str, corpus: str) -> None:
    """The prediction metrics of the replaced runs by jump layer, beside id and mat."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.report.figures.prediction import prediction_figure

    ready()
    prediction_figure(
        read_table(table),
        f"{model} on {corpus}",
        png,
        pdf,
        heading="Parts of every block after the jump layer replaced by linear maps",
        xlabel="jump layer l (blocks 1..l unchanged)",
    )
