"""The sentences each job draws from a corpus's splits, checked before any job runs
(jtc.pipeline.draws): the key that asks too much is named with both numbers and the fix."""

import pyarrow as pa
import pyarrow.parquet as pq

from jtc.files.planned import PlannedJob
from jtc.pipeline.draws import (
    lines_problem,
    sizes_problem,
    split_counts,
    split_draws,
    split_problem,
)


def config(**pruning):
    return {
        "sizes": {"train": 40, "validation": 10},
        "corpora": {"news": {}},
        "pruning": {
            "models": ["lm"],
            "corpora": [],
            "calibration": {"text": "sentences"},
            "calibration_sentences": 20,
            "evaluation_sentences": 4,
            "selected_sentences": 6,
            "measures_in_all": False,
            "generation": {"prompts": 3},
            **pruning,
        },
    }


def test_each_rule_draws_with_its_own_key():
    keys = lambda rules: [d.key for d in split_draws(config(), rules)]  # noqa: E731
    assert keys(["run_pruned"]) == ["pruning.evaluation_sentences", "pruning.selected_sentences"]
    assert keys(["context_perplexity"]) == ["pruning.calibration_sentences"]
    assert keys(["extract_hidden"]) == ["sizes.train", "sizes.validation"]
    (prompts,) = split_draws(config(), ["generation_fidelity"])
    assert (prompts.split, prompts.after, prompts.needed) == ("validation", 6, 9)
    assert keys(["r2_table"]) == []
    # windows of running text are sized in tokens: calibrate_pruning checks them, no draw
    windows = lambda rules: [  # noqa: E731
        d.key for d in split_draws(config(calibration={"text": "windows"}), rules)
    ]
    assert windows(["calibrate_pruning", "context_perplexity"]) == []
    assert windows(["run_pruned"]) == keys(["run_pruned"])


def test_too_few_sentences_name_the_pruning_key_the_numbers_and_the_fix():
    draws = split_draws(config(evaluation_sentences=50), ["extract_hidden", "run_pruned"])
    counts = {"train": 100, "validation": 30}
    problem = split_problem("news", counts, draws, "its sentence table t.parquet")
    assert problem == (
        "config key 'pruning.evaluation_sentences': 50 validation sentences asked of corpus "
        "'news', which has 30 (its sentence table t.parquet); "
        "lower pruning.evaluation_sentences to at most 30, or give the corpus more validation "
        "sentences (a larger corpus, corpora.news.max_sentences, validation_fraction)"
    )
    prompts = split_draws(config(), ["generation_fidelity"])
    problem = split_problem("news", {"validation": 8}, prompts, "t")
    assert "3 validation sentences after the 6 evaluation and selected ones (9 in all)" in problem
    assert "lower pruning.generation.prompts to at most 2 (or pruning.evaluation_" in problem
    assert split_problem("news", counts, split_draws(config(), ["run_pruned"]), "t") is None


def test_a_prepared_sentence_table_is_checked_as_the_run_starts(tmp_path):
    table = tmp_path / "news.parquet"
    pq.write_table(pa.table({"split": ["train"] * 30 + ["validation"] * 5}), table)
    assert split_counts(table) == {"train": 30, "validation": 5}
    prepared = PlannedJob("prepare_corpus", {"corpus": "news"}, {}, [str(table)], False)
    calibrate = PlannedJob("calibrate_pruning", {"model": "lm", "corpus": "news"}, {}, [], True)
    run = PlannedJob("run_pruned", {"model": "lm", "corpus": "news"}, {}, [], True)
    problem = sizes_problem([prepared, calibrate, run], config())
    assert problem.startswith("invalid configuration: config key 'pruning.selected_sentences'")
    assert f"which has 5 (its sentence table {table})" in problem
    assert sizes_problem([prepared, calibrate], config()) is None  # nothing draws too many
    remade = PlannedJob("prepare_corpus", {"corpus": "news"}, {}, [str(table)], True)
    assert sizes_problem([remade, calibrate, run], config()) is None  # counted when made


def test_a_text_file_bounds_the_draws_while_planning(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("".join(f"Sentence number {i} is here.\n" for i in range(60)))
    spec = {"source": "text_file", "path": str(text)}
    assert lines_problem("news", spec, config()) is None
    problem = lines_problem("news", spec, config(calibration_sentences=55))
    assert problem.startswith("config key 'pruning.calibration_sentences': ")
    assert f"which has 50 ({text}: at most 60 sentences, one a line, 10 of them validation" in (
        problem
    )
    assert lines_problem("news", spec, config(models=[])) is None  # not pruned
    capped = {**spec, "max_sentences": 52}  # room for sizes (50), not for 45 + 10
    assert lines_problem("news", capped, config(calibration_sentences=40)) is None
    assert "which has 42" in lines_problem("news", capped, config(calibration_sentences=45))
