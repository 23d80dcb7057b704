"""Stages of workflow/rules/submodules.smk, linear shortcuts across sub-modules: record every
block part's input and output, fit a map per (block, part) and score it, compute the states
below each jump layer, run the model with parts replaced after it, and tabulate the runs."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def record_parts(
    model_dir: str,
    sentences: str,
    out: str,
    *,
    model: str,
    corpus: str,
    split: str,
    threads: int,
    device_map: str | None = None,
    **sampling: int | str,
) -> None:
    """The input and output of every block part at the positions extract_hidden draws (same
    sentences, same positions), one Parquet file per (block, part, side)."""
    from jtc.data.extract import record_states

    record_states(
        model_dir,
        sentences,
        out,
        meta={"model": model, "corpus": corpus, "split": split},
        threads=threads,
        parts=True,
        device_map=device_map,
        **sampling,
    )


def fit_parts(train_dir: str, out: str, *, model: str, corpus: str, threads: int) -> None:
    """A least-squares map from input to output of every part of every block, training split
    (on the GPU when the job has one), written a block at a time."""
    from threadpoolctl import threadpool_limits

    from jtc.devices import linalg_device
    from jtc.files.io import read_json
    from jtc.logs import ready
    from jtc.shortcuts.maps import PartMapWriter
    from jtc.shortcuts.parts import fit_parts as fit
    from jtc.shortcuts.underdetermined import TRAINING_ROWS

    info = read_json(f"{train_dir}/info.json")
    device = linalg_device()
    ready()
    rows = info["sentences"]  # one row (position) per sentence, in every part's files
    meta = {"method": "mat", "model": model, "corpus": corpus, "n_train": rows, TRAINING_ROWS: rows}
    solvers = {}
    widths: dict[str, int] = {}  # part -> its input width (the widest over the blocks)
    with PartMapWriter(out, meta) as maps, threadpool_limits(threads):
        for block in range(1, info["num_layers"] + 1):
            weights, block_solvers = fit(train_dir, [block], device)
            maps.add(block, {part: weight for (_, part), weight in weights.items()})
            solvers.update(block_solvers)
            for (_, part), weight in weights.items():
                widths[part] = max(widths.get(part, 0), weight.shape[1])
        maps.metadata["solvers"] = solvers
    _warn_underdetermined_parts(model, corpus, rows, widths)


def _warn_underdetermined_parts(model: str, corpus: str, rows: int, widths: dict[str, int]) -> None:
    """One warning (logger "jtc") for the parts whose maps were fitted on fewer rows than the
    part's input width."""
    from jtc.shortcuts.underdetermined import warn_if_underdetermined

    flagged = sorted({w for w in widths.values() if rows < w})
    for width in flagged:
        parts = ", ".join(p for p, w in widths.items() if w == width)
        warn_if_underdetermined(model, corpus, f"sub-module part maps ({parts})", rows, width)


def part_r2_table(val_dir: str, maps: str, out: str, *, model: str, corpus: str) -> None:
    """r² of every (block, part) map on the recorded validation inputs and outputs (on the GPU
    when the job has one)."""
    from jtc.devices import linalg_device
    from jtc.files.io import write_table
    from jtc.logs import ready
    from jtc.shortcuts.maps import load_part_maps
    from jtc.shortcuts.parts import part_r2_table as r2

    ready()
    part_maps = load_part_maps(maps)
    table = r2(val_dir, part_maps, model=model, corpus=corpus, device=linalg_device())
    write_table(with_part_training_rows(table, maps, part_maps), out, csv=True)


def with_part_training_rows(table, path: str, part_maps: dict):
    """The part r² table with `training_rows` (the rows the part maps were fitted on, from
    their file `path`; null if it records none) and `underdetermined` (fewer rows than the
    part's input width, the width of its map). Logs a warning (logger "jtc") per width of the
    underdetermined parts."""
    import pyarrow as pa
    from safetensors import safe_open

    from jtc.shortcuts.underdetermined import training_rows, underdetermined

    with safe_open(str(path), framework="numpy") as handle:  # the header only, no tensors
        rows = training_rows(handle.metadata() or {})  # numbers stored as their JSON text
    parts = table.column("part").to_pylist()
    blocks = table.column("block").to_pylist()
    widths = [part_maps[(b, p)].width for b, p in zip(blocks, parts, strict=True)]
    if rows is not None and table.num_rows:
        widest: dict[str, int] = {}
        for part, width in zip(parts, widths, strict=True):
            widest[part] = max(widest.get(part, 0), width)
        model, corpus = table.column("model")[0].as_py(), table.column("corpus")[0].as_py()
        _warn_underdetermined_parts(model, corpus, rows, widest)
    table = table.append_column("training_rows", pa.array([rows] * table.num_rows, pa.int64()))
    flags = [underdetermined(rows, width) for width in widths]
    return table.append_column("underdetermined", pa.array(flags, pa.bool_()))


def plot_part_r2(table: str, png: str, pdf: str, *, model: str, corpus: str) -> None:
    """The block × part r² heatmap."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.report.plots import part_r2_heatmap

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
    """For every jump layer l in `jumps`: h_l at every position of the first `count` validation
    sentences, from one pass of the unmodified model (blocks 1..max(jumps)); then for each
    variant, blocks l+1..L run from those states with the variant's parts replaced by their
    maps, and the final states are decoded and scored against the unmodified model's
    prediction. One table into `out`: decode_predictions' columns, method = variant, layer = l.
    The states below the jump layers stay in float32 whatever storage_dtype says."""
    import time

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from jtc.data.extract import pad_token_id, prepare_sentences
    from jtc.evaluation.decode import final_reference, score, score_table
    from jtc.files.io import CorruptFileError, read_aligned, read_positions, read_table, write_table
    from jtc.logs import Progress, ready
    from jtc.model.adapters import adapter_of, part_adapter
    from jtc.model.cache import load_head, load_model, model_head
    from jtc.shortcuts.maps import load_part_maps
    from jtc.shortcuts.replace import prefix_states, replaced_final_states

    net, tokenizer, info = load_model(model_dir, threads, device_map)
    adapter = part_adapter(adapter_of(info))
    # a model spread over GPUs (device_map) may hold its head across devices: read it whole
    head = load_head(model_dir, model, threads)[0] if device_map else model_head(net, info, model)
    ready()
    validation, val_info = read_positions(val_dir)
    chosen = validation.slice(0, count or len(validation))  # the first: the split is shuffled
    ids = chosen.column("sentence_id").to_numpy()
    positions = chosen.column("position").to_numpy()
    gold = chosen.column("gold_id").to_numpy()
    text = read_table(sentences, ["sentence_id", "text"])
    rows = pc.index_in(pa.array(ids), text.column("sentence_id"))
    if rows.null_count:
        raise CorruptFileError(f"{sentences} lacks sentences of the validation states {val_dir}")
    prepared, _ = prepare_sentences(
        tokenizer, info, text.take(rows), val_info["seed"], val_info["max_tokens"]
    )
    if not (
        np.array_equal(prepared.sentence_ids, ids) and np.array_equal(prepared.positions, positions)
    ):
        raise CorruptFileError(f"{val_dir}: its positions differ from {sentences} tokenised again")
    started = time.perf_counter()
    prefixes = prefix_states(
        net, adapter, prepared.inputs, jumps, batch_size, pad_token_id(tokenizer)
    )
    log.info("blocks 1..%d: %.2f s", max(jumps), time.perf_counter() - started)
    all_ids = validation.column("sentence_id").to_numpy()
    final = read_aligned(val_dir, val_info["num_layers"], all_ids, np.float32)[: len(ids)]
    reference = final_reference(head, final, top_k)
    part_maps = load_part_maps(maps)
    tables = []
    progress = Progress(len(set(jumps)) * len(variants), "replace", "runs")
    for jump in sorted(set(jumps)):
        for variant, parts in variants.items():
            replaced = {k: m for k, m in part_maps.items() if k[1] in parts}
            started = time.perf_counter()
            states = replaced_final_states(
                net, adapter, prefixes[jump], positions, jump, replaced, batch_size
            )
            forward = time.perf_counter() - started
            scores = score(head, reference, states, gold)
            log.info(
                "%s, jump %d: precision@1 %.3f; forward passes %.2f s",
                variant,
                jump,
                np.mean(scores["final_rank"] == 1),
                forward,
            )
            diverged = int((scores["top1_id"] < 0).sum())
            if diverged:
                log.warning(
                    "%s, jump %d: %d of %d runs overflowed (inf or NaN): counted as misses",
                    variant,
                    jump,
                    diverged,
                    len(ids),
                )
            tables.append(score_table(variant, jump, ids, scores))
            progress.update(1)
        del prefixes[jump]  # memory: this jump layer's states are done with
    write_table(pa.concat_tables(tables), out)


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
    import pyarrow as pa
    import pyarrow.compute as pc

    from jtc.evaluation.prediction import prediction_summary
    from jtc.files.io import read_table, write_table
    from jtc.logs import ready
    from jtc.settings import IntervalSettings

    ready()
    runs = read_table(replaced)
    scores = {
        v: runs.filter(pc.equal(runs.column("method"), v))
        for v in dict.fromkeys(runs.column("method").to_pylist())
    }
    evaluated = pa.array(next(iter(scores.values())).column("sentence_id").unique())
    for method, path in prediction_files.items():
        table = read_table(path)
        scores[method] = table.filter(pc.is_in(table.column("sentence_id"), evaluated))
    summary = prediction_summary(
        scores,
        model=model,
        corpus=corpus,
        settings=IntervalSettings.of(settings),
        seed=seed,
        diverged=True,
    )
    write_table(summary, out, csv=True)


def plot_submodules(table: str, png: str, pdf: str, *, model: str, corpus: str) -> None:
    """The prediction metrics of the replaced runs by jump layer, beside id and mat."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.report.plots import prediction_figure

    ready()
    prediction_figure(
        read_table(table),
        f"{model} on {corpus}",
        png,
        pdf,
        heading="Parts of every block after the jump layer replaced by linear maps",
        xlabel="jump layer l (blocks 1..l unchanged)",
    )
