"""Depth pruning's sentence counts checked before any job draws them, naming the pruning key
(not sizes.X): against a text file's lines while planning (a dry run too), and exactly against
the sentence table once it is made (prepare_corpus is a checkpoint), whether it was there
before the run or made in it."""

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from harness import link_inputs, read_config, run_snakemake, write_config

pytestmark = pytest.mark.workflow

PRUNING = {
    "models": ["gpt"],
    "calibration": {"text": "sentences"},
    "calibration_sentences": 20,
    "evaluation_sentences": 4,
    "selected_sentences": 8,
    "context": {"lengths": [16], "windows": 2},
}


@pytest.fixture
def work(tiny_project, tmp_path):
    return link_inputs(tiny_project, tmp_path / "work")


def configure(work, tiny_project, **pruning):
    config = read_config(tiny_project)
    config["models"] = {"gpt": config["models"]["gpt"]}
    write_config(work, {**config, "pruning": {**PRUNING, **pruning}})


def test_more_evaluation_sentences_than_the_text_has_are_refused_while_planning(work, tiny_project):
    configure(work, tiny_project, evaluation_sentences=190)  # 200 lines, 48 for training
    proc = run_snakemake(work, "all", "-n", check=False)
    output = proc.stdout + proc.stderr  # a dry run writes its errors to stdout
    assert proc.returncode != 0
    key = "pruning.evaluation_sentences"
    assert f"config key '{key}': 190 validation sentences asked of corpus 'mini'" in output
    assert "lower sizes.validation" not in output


def test_too_many_pruning_sentences_are_refused_before_they_are_drawn(work, tiny_project, tmp_path):
    configure(work, tiny_project)
    run_snakemake(work, "results/corpora/mini.parquet")
    splits = pq.read_table(work / "results/corpora/mini.parquet").column("split")
    validation = pc.sum(pc.equal(splits, "validation")).as_py()
    train = len(splits) - validation
    # a prepared corpus: refused before any job runs
    for key, split, have in [
        ("evaluation_sentences", "validation", validation),
        ("calibration_sentences", "train", train),
    ]:
        configure(work, tiny_project, **{key: have + 1})
        proc = run_snakemake(work, "all", check=False)
        assert proc.returncode != 0
        asked = f"config key 'pruning.{key}': {have + 1} {split} sentences asked of corpus"
        assert asked in proc.stderr
        assert f"which has {have} (its sentence table results/corpora/mini.parquet)" in (
            proc.stderr
        )
        assert f"lower pruning.{key} to at most {have}" in proc.stderr
        assert sorted(p.name for p in (work / "results").iterdir()) == ["corpora"]  # no job ran

    # a corpus prepared in the run: the text's lines bound the validation split from above
    # only; the exact count is known once prepare_corpus (a checkpoint) has made the table, and
    # checked before any pruning job
    fresh = link_inputs(tiny_project, tmp_path / "fresh")
    configure(fresh, tiny_project, evaluation_sentences=validation + 1)
    assert run_snakemake(fresh, "all", "-n", check=False).returncode == 0  # not known yet
    proc = run_snakemake(fresh, "all", check=False)
    assert proc.returncode != 0
    asked = f"config key 'pruning.evaluation_sentences': {validation + 1} validation sentences"
    assert asked in proc.stderr
    assert not (fresh / "results/pruning").exists()  # nothing drew them


def test_calibration_windows_beyond_the_model_or_the_text_are_refused_naming_the_key(
    work, tiny_project
):
    # longer than the tiny GPT-2's 64 positions: refused while planning (its config.json)
    configure(work, tiny_project, calibration={"windows": 2, "window_tokens": 65})
    proc = run_snakemake(work, "all", "-n", check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config key 'pruning.calibration.window_tokens' is 65 tokens, more than model 'gpt'" in (
        output
    )
    # more running text than the training documents outside the held-out ones give: refused
    # by calibrate_pruning, before any forward pass, saying how many windows fit
    configure(work, tiny_project, calibration={"windows": 100_000, "window_tokens": 64})
    proc = run_snakemake(work, "results/pruning/gpt/mini/maps.safetensors", check=False)
    assert proc.returncode != 0
    log = (work / "logs/calibrate_pruning/gpt/mini.log").read_text()
    assert "config key 'pruning.calibration.windows': 100000 windows × 64 tokens" in log
    fit = int(log.split("lower pruning.calibration.windows to at most ")[1].split(" ")[0])
    assert 0 < fit < 100_000
