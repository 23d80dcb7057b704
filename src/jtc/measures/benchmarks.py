"""Accuracy on standard tasks through lm-evaluation-harness (lm_eval.simple_evaluate with its
HFLM around a model in memory), for the full model and each pruned model (jtc.measures.subjects):
every document's acc and acc_norm, as the pruning papers report them (zero-shot; mmlu's few-shot
examples, where configured, are in its documents, jtc.measures.tasks)."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from torch import nn

from jtc.files.io import rows_table
from jtc.measures.subjects import SUBJECT_COLUMNS, Subject, subject_columns, subject_model
from jtc.model.adapters import Adapter

DOCUMENT_COLUMNS = {
    **SUBJECT_COLUMNS,
    "task": pa.string(),
    "split": pa.string(),  # the split scored (jtc.measures.tasks.TaskSpec.split)
    "shots": pa.int64(),  # few-shot examples before each document
    "doc_id": pa.int64(),  # the document's index in the task's file (its split's order)
    "acc": pa.float64(),  # 1: the most likely choice is the target
    "acc_norm": pa.float64(),  # the same, log-likelihoods per byte; null where lm-eval has none
    "choices": pa.int64(),  # the document's number of choices (its chance level: 1 / choices)
}


@contextlib.contextmanager
def offline_datasets() -> Iterator[None]:
    """lm-eval's `datasets` offline, its cache of the JSON lines in a temporary folder (not the
    user's ~/.cache), for the duration."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    before = datasets.config.HF_DATASETS_CACHE
    with tempfile.TemporaryDirectory(prefix="jtc-lm-eval-") as cache:
        datasets.config.HF_DATASETS_CACHE = Path(cache)
        try:
            yield
        finally:
            datasets.config.HF_DATASETS_CACHE = before


def _check_tokenizer(tokenizer: Any) -> None:
    if tokenizer.bos_token_id is None and tokenizer.eos_token_id is None:
        raise ValueError(
            "lm-eval scores a continuation after the tokenizer's BOS (or EOS) token: this "
            "tokenizer has neither"
        )


def evaluate_model(
    model: nn.Module,
    tokenizer: Any,
    task_configs: Sequence[dict[str, Any]],
    *,
    batch_size: int,
    seed: int,
) -> dict[str, list[dict[str, Any]]]:
    """task -> its documents' {split, shots, doc_id, acc, acc_norm, choices} (doc_id order),
    for one model."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    _check_tokenizer(tokenizer)
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    with offline_datasets():
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
        results = simple_evaluate(
            model=lm,
            tasks=[dict(config) for config in task_configs],
            task_manager=TaskManager(include_defaults=False),
            num_fewshot=0,
            log_samples=True,
            bootstrap_iters=0,
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
        )
    out: dict[str, list[dict[str, Any]]] = {}
    for config in task_configs:
        samples = sorted(results["samples"][config["task"]], key=lambda s: int(s["doc_id"]))
        metadata = config.get("metadata", {})
        out[config["task"]] = [
            {
                "split": metadata.get("split"),
                "shots": int(metadata.get("shots", 0)),
                "doc_id": int(s["doc_id"]),
                "acc": float(s["acc"]),
                "acc_norm": float(s["acc_norm"]) if "acc_norm" in s else None,
                "choices": len(s["arguments"]),
            }
            for s in samples
        ]
    return out


def run_benchmarks(
    model: nn.Module,
    tokenizer: Any,
    adapter: Adapter,
    subjects: Sequence[Subject],
    maps: str | Path,
    task_configs: Sequence[dict[str, Any]],
    *,
    batch_size: int,
    seed: int,
) -> pa.Table:
    """Every document of every task scored for each subject (DOCUMENT_COLUMNS), each pruned
    model built in memory in turn (jtc.measures.subjects.subject_model)."""
    rows = []
    for subject in subjects:
        scored = subject_model(model, adapter, subject, maps)
        documents = evaluate_model(
            scored, tokenizer, task_configs, batch_size=batch_size, seed=seed
        )
        del scored
        for task, docs in documents.items():
            rows += [{**subject_columns(subject), "task": task, **doc} for doc in docs]
    return rows_table(rows, DOCUMENT_COLUMNS)
