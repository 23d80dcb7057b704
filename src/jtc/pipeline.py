"""The workflow's stages as plain functions: each reads its inputs, calls the library and
writes its outputs atomically. The Snakemake scripts only unpack `snakemake.*` and call these."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from . import corpus as corpus_lib
from .fit import fit_source, load_maps, save_maps, shortcut_function
from .io import atomic_dir, read_aligned, read_json, read_states, read_table, write_table
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
) -> None:
    import torch

    from .extract import extract
    from .models import load_cached

    torch.set_num_threads(threads)
    net, tokenizer, info = load_cached(model_dir)
    if torch.cuda.is_available():
        net = net.cuda()
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
    n_layers = len(states) - 1
    rows = []
    for method in sorted(maps):
        files = maps[method]
        for source in range(n_layers):
            weights = load_maps(files[source]) if files else None
            for target in range(source + 1, n_layers + 1):
                predict = shortcut_function(method, weights, target)
                rows.append(
                    (
                        model,
                        corpus,
                        method,
                        source,
                        target,
                        r2_score(states[target], predict(states[source])),
                    )
                )
    return rows


def plot_r2(table_path: str, method: str, png: str, pdf: str, *, model: str, corpus: str) -> None:
    from .plots import r2_heatmap

    r2_heatmap(read_table(table_path), method, f"{method} r² — {model} on {corpus}", png, pdf)
