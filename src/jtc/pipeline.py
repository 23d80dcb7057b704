"""The workflow's stages as plain functions: each reads its inputs, calls the library and
writes its outputs atomically. The Snakemake scripts only unpack `snakemake.*` and call these."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
from threadpoolctl import threadpool_limits

from . import corpus as corpus_lib
from .fit import fit_source
from .io import (
    CorruptFileError,
    atomic_dir,
    atomic_path,
    layer_file,
    read_aligned,
    read_json,
    read_states,
    read_table,
    rows_table,
    write_table,
)
from .maps import load_map, load_maps, save_maps
from .metrics import r2_score, r2_table

# torch, transformers and matplotlib are imported inside the stages that need them, so that
# the many small fit jobs start fast.

log = logging.getLogger(__name__)


def prepare_corpus(
    name: str, spec: dict, archive: str | None, out: str, *, seed: int, validation_fraction: float
) -> None:
    pairs = corpus_lib.read_source(spec, Path(archive) if archive else None)
    table = corpus_lib.sentence_table(
        pairs, name, seed, validation_fraction, spec.get("max_sentences")
    )
    write_table(table, out)


def download_corpus(url: str, sha256: str | None, out: str) -> None:
    corpus_lib.download(url, Path(out), sha256)


def resolve_model(name: str, spec: dict, out: str) -> None:
    from .models import cache_model

    info = cache_model(name, spec, out)
    log.info("cached %s: %s", name, info)


def extract_hidden(
    model_dir: str,
    sentences: str,
    out: str,
    *,
    model: str,
    corpus: str,
    split: str,
    n: int,
    seed: int,
    batch_size: int,
    max_tokens: int,
    dtype: str,
    threads: int,
    parts: bool = False,
) -> None:
    """The states h_0..h_L at one drawn position per sentence of a split (with `parts`: the
    input and output of every block part there instead)."""
    from .extract import extract

    net, tokenizer, info = load_model(model_dir, threads)
    table = corpus_lib.select_split(read_table(sentences), split, n, corpus)
    with atomic_dir(out) as tmp:
        extract(
            net,
            tokenizer,
            info,
            table,
            tmp,
            seed=seed,
            batch_size=batch_size,
            max_tokens=max_tokens,
            dtype=dtype,
            meta={"model": model, "corpus": corpus, "split": split},
            parts=parts,
        )


def fit_mat(
    train_dir: str, out: str, *, source: int, model: str, corpus: str, threads: int
) -> None:
    """Fit mat from `source` to every later layer on the training states."""
    info = read_json(Path(train_dir) / "info.json")
    ids, x = read_states(train_dir, source)
    # targets stay float32 here: fit_source copies them into its float64 buffer
    targets = (
        (t, read_aligned(train_dir, t, ids, dtype=np.float32))
        for t in range(source + 1, info["num_layers"] + 1)
    )
    with threadpool_limits(threads):
        weights, solver = fit_source(x, targets)
    save_maps(
        out,
        weights,
        {
            "method": "mat",
            "model": model,
            "corpus": corpus,
            "source_layer": source,
            "n_train": len(ids),
            "solver": solver,
        },
    )


def train_map(
    train_dir: str,
    out: str,
    *,
    model_dir: str | None,
    method: str,
    source: int,
    settings: dict,
    seed: int,
    model: str,
    corpus: str,
    threads: int,
) -> None:
    """Train a method's maps from `source` to the target layers its settings ask for
    (jtc.methods.fitted_targets), on a GPU if the job has one; the tuned lens trains through
    the cached model's decoder head."""
    import torch

    from .methods import fitted_targets
    from .train import TrainSettings, default_rank, pair_seed, train_low_rank, train_tuned_lens

    torch.set_num_threads(threads)
    info = read_json(Path(train_dir) / "info.json")
    targets = fitted_targets(method, settings.get("targets", "last"), source, info["num_layers"])
    ids, x = read_states(train_dir, source)
    training = TrainSettings.from_config(settings)
    results = {}
    if method == "tuned_lens":
        if model_dir is None:
            raise ValueError("the tuned lens is trained through the model's head: no model given")
        head, _, _ = load_head(model_dir, model, threads)
        for target in targets:  # the last layer: the final prediction is read from its states
            final = read_aligned(train_dir, target, ids, np.float32)
            seed_t = pair_seed(seed, method, source, target)
            results[target] = train_tuned_lens(x, head, final, settings=training, seed=seed_t)
    else:
        rank = settings["rank"] or default_rank(x.shape[1])
        for target in targets:
            results[target] = train_low_rank(
                x,
                read_aligned(train_dir, target, ids, np.float32),
                rank=rank,
                normalise=method == "nnjtc",
                settings=training,
                seed=pair_seed(seed, method, source, target),
            )
    for target, result in results.items():
        log.info(
            "%s %d -> %d: %s, %.2f s", method, source, target, result.summary(), result.seconds
        )
    save_maps(
        out,
        {t: r.tensors for t, r in results.items()},
        {
            "method": method,
            "model": model,
            "corpus": corpus,
            "source_layer": source,
            "n_train": len(ids),
            "seed": seed,
            "settings": settings,
            "training": {str(t): r.summary() for t, r in results.items()},
        },
    )


def r2_metrics(
    val_dir: str, maps: dict[str, list[str]], out: str, *, model: str, corpus: str, threads: int = 1
) -> None:
    """r² of every method on every pair l < l' of the validation states.

    `maps` gives, per method, the map files (one per source layer, in order); id needs none."""
    info = read_json(Path(val_dir) / "info.json")
    n_layers = info["num_layers"]
    ids, first = read_states(val_dir, 0)
    states = [first] + [read_aligned(val_dir, layer, ids) for layer in range(1, n_layers + 1)]
    with threadpool_limits(threads):
        rows = _r2_rows(states, maps, model, corpus)
    write_table(r2_table(rows), out, csv=True)


def _r2_rows(states, maps, model, corpus):
    """Every pair for id; for a fitted method, the pairs its files hold (a trained method may
    fit only the maps into the last layer)."""
    n_layers = len(states) - 1
    rows = []
    for method in sorted(maps):
        files = maps[method]
        for source in range(n_layers):
            if files:
                fitted = load_maps(files[source])
            else:
                fitted = {t: None for t in range(source + 1, n_layers + 1)}
            for target, shortcut in fitted.items():
                predicted = states[source] if shortcut is None else shortcut(states[source])
                rows.append(
                    (model, corpus, method, source, target, r2_score(states[target], predicted))
                )
    return rows


PARAMETER_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "method": pa.string(),
    "hidden_size": pa.int64(),
    "rank": pa.int64(),
    "parameters": pa.int64(),  # trained, per map (one layer pair)
    "buffers": pa.int64(),  # stored but not trained (batch normalisation's running statistics)
    "share_of_mat": pa.float64(),  # (parameters + buffers) / d²
}


def parameter_table(
    model_dir: str, map_files: dict[str, str], out: str, *, model: str, corpus: str
) -> None:
    """Parameters of one map (layer 0 into the last layer) per method, beside mat's d²."""
    info = read_json(Path(model_dir) / "info.json")
    num_layers, width = info["num_layers"], info["hidden_size"]
    rows = [
        {
            "model": model,
            "corpus": corpus,
            "method": "id",
            "hidden_size": width,
            "parameters": 0,
            "buffers": 0,
            "share_of_mat": 0.0,
        }
    ]
    for method, path in sorted(map_files.items()):
        shortcut = load_map(path, num_layers)
        parameters, buffers = shortcut.parameter_counts()
        rows.append(
            {
                "model": model,
                "corpus": corpus,
                "method": method,
                "hidden_size": shortcut.width,
                "rank": shortcut.rank,
                "parameters": parameters,
                "buffers": buffers,
                "share_of_mat": (parameters + buffers) / shortcut.width**2,
            }
        )
    write_table(rows_table(rows, PARAMETER_COLUMNS), out, csv=True)


def plot_r2(table_path: str, method: str, png: str, pdf: str, *, model: str, corpus: str) -> None:
    from .plots import r2_heatmap

    r2_heatmap(read_table(table_path), method, f"{method} r² — {model} on {corpus}", png, pdf)


# --- prediction from early layers ----------------------------------------------------------


def _to_last_layer(files: list[str], source: int, states: np.ndarray, last: int) -> np.ndarray:
    """States of layer `source` mapped to the last layer by a method's map files (none: id)."""
    if source == last or not files:
        return states
    return load_map(files[source], last)(states)


def load_model(model_dir: str, threads: int):
    """(model, tokenizer, info) of a cached model, on the GPU when the job has one."""
    import torch

    from .models import load_cached

    torch.set_num_threads(threads)
    net, tokenizer, info = load_cached(model_dir)
    if torch.cuda.is_available():
        net = net.cuda()
    return net, tokenizer, info


def load_head(model_dir: str, model: str, threads: int):
    """(decoder head, tokenizer, info) of a cached model."""
    from .adapters import get_adapter
    from .decode import Head

    net, tokenizer, info = load_model(model_dir, threads)
    return Head.from_model(net, get_adapter(info["architecture"]), model), tokenizer, info


def validation_positions(val_dir: str) -> tuple[pa.Table, dict]:
    info = read_json(Path(val_dir) / "info.json")
    positions = read_table(Path(val_dir) / "positions.parquet")
    # the ids only: the states themselves are read (and checked row by row) by the callers
    ids = read_table(layer_file(val_dir, info["num_layers"]), ["sentence_id"]).column(0)
    if not np.array_equal(positions.column("sentence_id").to_numpy(), ids.to_numpy()):
        raise CorruptFileError(f"{val_dir}: positions.parquet does not match the stored states")
    return positions, info


def decode_predictions(
    model_dir: str,
    val_dir: str,
    map_files: list[str],
    out: str,
    *,
    model: str,
    method: str,
    top_k: int,
    threads: int,
) -> None:
    """Per-position scores (decode.SCORE_COLUMNS) of `method` at every layer, validation split."""
    from .decode import final_reference, score

    head, _, _ = load_head(model_dir, model, threads)
    positions, info = validation_positions(val_dir)
    last = info["num_layers"]
    ids = positions.column("sentence_id").to_numpy()
    gold = positions.column("gold_id").to_numpy()
    final = read_aligned(val_dir, last, ids, np.float32)
    reference = final_reference(head, final, top_k)
    tables = []
    for layer in range(last + 1):
        states = read_aligned(val_dir, layer, ids, np.float32)
        mapped = _to_last_layer(map_files, layer, states, last)
        scores = score(head, reference, mapped.astype(np.float32, copy=False), gold)
        tables.append(
            pa.table(
                {
                    "method": pa.array([method] * len(ids), pa.string()),
                    "layer": pa.array(np.full(len(ids), layer), pa.int32()),
                    "sentence_id": pa.array(ids, pa.int64()),
                    **scores,
                }
            )
        )
        log.info("layer %d: precision@1 %.3f", layer, np.mean(scores["final_rank"] == 1))
    write_table(pa.concat_tables(tables), out)


def prediction_table(
    score_files: dict[str, str],
    out: str,
    *,
    model: str,
    corpus: str,
    top_k: list[int],
    resamples: int,
    level: float,
    seed: int,
) -> None:
    scores = {method: read_table(path) for method, path in score_files.items()}
    write_summary(
        scores,
        out,
        model=model,
        corpus=corpus,
        top_k=top_k,
        resamples=resamples,
        level=level,
        seed=seed,
    )


def write_summary(scores: dict[str, pa.Table], out: str, **settings) -> None:
    """The tidy metrics table (jtc.prediction.prediction_summary) of per-position scores, by
    method, and its CSV copy."""
    from .prediction import prediction_summary

    write_table(prediction_summary(scores, **settings), out, csv=True)


def plot_prediction(table_path: str, png: str, pdf: str, *, model: str, corpus: str) -> None:
    from .plots import prediction_figure

    prediction_figure(read_table(table_path), f"{model} on {corpus}", png, pdf)


def prediction_examples(
    model_dir: str,
    val_dir: str,
    sentences: str,
    map_files: dict[str, list[str]],
    out: str,
    markdown: str,
    *,
    model: str,
    corpus: str,
    count: int,
    layers: list[int],
    threads: int,
) -> None:
    """A few validation sentences with the model's top-5 and each method's top-5 per layer."""
    from . import examples
    from .decode import top_tokens

    head, tokenizer, model_info = load_head(model_dir, model, threads)
    positions, info = validation_positions(val_dir)
    all_ids = positions.column("sentence_id").to_numpy()
    chosen = positions.slice(0, count)  # the validation split is in seeded random order
    ids = all_ids[:count]
    last = info["num_layers"]
    corpus_table = read_table(sentences, ["sentence_id", "text"])
    text_of = dict(
        zip(
            corpus_table.column("sentence_id").to_pylist(),
            corpus_table.column("text").to_pylist(),
            strict=True,
        )
    )
    context = examples.contexts(
        tokenizer,
        [text_of[int(i)] for i in ids],
        ids,
        chosen.column("position").to_numpy(),
        task=info["task"],
        seed=info["seed"],
        max_tokens=info["max_tokens"],
        mask_token_id=model_info.get("mask_token_id"),
    )
    gold = [
        examples.token_text(tokenizer, g) if g >= 0 else "(end of sentence)"
        for g in chosen.column("gold_id").to_pylist()
    ]

    def layer_states(layer: int) -> np.ndarray:
        return read_aligned(val_dir, layer, all_ids, np.float32)[:count]

    predictions = {(examples.FINAL, last): top_tokens(head, layer_states(last), 5)}
    for layer in examples.example_layers(layers, last):
        states = layer_states(layer)
        for method in sorted(map_files):
            mapped = _to_last_layer(map_files[method], layer, states, last)
            predictions[(method, layer)] = top_tokens(head, mapped.astype(np.float32), 5)
    table = examples.examples_table(
        ids, context, gold, predictions, lambda t: examples.token_text(tokenizer, t)
    )
    write_table(table, out, csv=True)
    with atomic_path(markdown) as tmp:
        tmp.write_text(
            examples.examples_markdown(table, f"{model} on {corpus}", info["task"]) + "\n"
        )


# --- early exit ----------------------------------------------------------------------------


def early_exit_tables(
    score_files: dict[str, str],
    val_dir: str,
    sweep_out: str,
    savings_out: str,
    *,
    model: str,
    corpus: str,
    lambdas: list[float],
    tau: float,
    lambda_weight: float,
    decay_weight: float,
    min_layer: int,
    targets: list[float],
) -> None:
    """The λ sweep and fixed exits of every method, and the layers saved at target accuracies."""
    from . import early_exit as ee

    positions, info = validation_positions(val_dir)
    last = info["num_layers"]
    t = positions.column("position").to_numpy()
    rule = ee.ExitRule(tau, lambda_weight, decay_weight, min_layer)
    grid = np.asarray(lambdas or ee.DEFAULT_LAMBDAS, dtype=np.float64)
    common = {"model": model, "corpus": corpus}
    sweeps, rows = {}, []
    for method, path in sorted(score_files.items()):
        ids, confidence, correct = ee.layer_arrays(read_table(path))
        if not np.array_equal(ids, positions.column("sentence_id").to_numpy()):
            raise CorruptFileError(f"{path}: positions differ from the validation states")
        result = sweeps[method] = ee.sweep(confidence, correct, t, grid, rule)
        for i, lam in enumerate(result.lambdas):
            rows.append(
                {
                    **common,
                    "method": method,
                    "policy": "confidence",
                    "lambda": float(lam),
                    "mean_layers": float(result.mean_layers[i]),
                    "accuracy": float(result.accuracy[i]),
                    "early_fraction": float(result.early_fraction[i]),
                }
            )
        for layer in range(rule.min_layer, last + 1):
            rows.append(
                {
                    **common,
                    "method": method,
                    "policy": "fixed",
                    "exit_layer": layer,
                    "mean_layers": float(layer),
                    "accuracy": float(correct[:, layer].mean()),
                    "early_fraction": float(layer < last),
                }
            )
        log.info(
            "%s: %d λ values, accuracy %.3f..%.3f",
            method,
            len(grid),
            result.accuracy.min(),
            result.accuracy.max(),
        )
    write_table(rows_table(rows, ee.SWEEP_COLUMNS), sweep_out, csv=True)
    saved = [{**common, **row} for row in ee.savings(sweeps, last, targets)]
    write_table(rows_table(saved, ee.SAVINGS_COLUMNS), savings_out, csv=True)


def plot_early_exit(sweep_path: str, png: str, pdf: str, *, model: str, corpus: str) -> None:
    from .plots import early_exit_figure

    early_exit_figure(read_table(sweep_path), f"{model} on {corpus}", png, pdf)
