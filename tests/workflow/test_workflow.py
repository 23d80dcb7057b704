"""The Snakemake workflow end to end on a tiny config (tiny random models, a small text file),
how a config given with --configfile replaces the default one, and the smoke experiment
(.test/config/config.yaml) on the real packaged models.

The tiny run (conftest.py's tiny_run) is made once and only read: a test that changes a config
reruns in its own copy (harness.copy_run)."""

import json
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from fake_gpu import fake_nvidia_smi
from harness import (
    ROOT,
    copy_run,
    link_inputs,
    planned,
    read_config,
    rules_run,
    run_snakemake,
    run_snakemake_all,
    selected,
    snapshot,
    write_config,
)
from tiny import save_model

from jtc.shortcuts.maps import read_metadata

pytestmark = pytest.mark.workflow

# what a smaller validation split reruns: validation states and what reads them, nothing else
VALIDATION_RERUN = {
    "extract_hidden": 2,
    "r2_table": 2,
    "plot_r2": 2,
    "decode_predictions": 2,
    "prediction_table": 2,
    "plot_prediction": 2,
    "prediction_examples": 2,
    "early_exit": 2,
    "plot_early_exit": 2,
    "headline_table": 1,
    "all": 1,
}


# a change to the training states: they, the fits, and everything after them (the validation
# states stay)
TRAINING_RERUN = {**VALIDATION_RERUN, "fit_map": 2, "fit_shortlist": 2, "parameter_table": 2}


def rerun_changed(finished, workdir, **changes):
    """Copy a finished run, change top-level keys of its config, rerun `all`: the rules run."""
    config = {**read_config(finished), **changes}
    copy_run(finished, workdir, config)
    return rules_run(run_snakemake(workdir, "all"))


def plan_changed(finished, workdir, **changes):
    """As rerun_changed, but a dry run: the rules a rerun would run (the same jobs: a run runs
    the jobs it plans, and no resolve_model checkpoint is pending in a finished run), without
    running them. For the tests that check which jobs rerun and nothing the jobs write."""
    config = {**read_config(finished), **changes}
    copy_run(finished, workdir, config)
    return rules_run(run_snakemake(workdir, "all", "-n"))


def test_first_run_runs_every_stage_and_writes_every_table(tiny_run, tiny_first_run):
    workdir = tiny_run
    ran = rules_run(tiny_first_run)
    assert ran["fit_map"] == 2 and ran["extract_hidden"] == 4 and ran["r2_table"] == 2
    # job logs read as text: the job's own progress lines, no carriage-return progress bars
    log = (workdir / "logs/extract_hidden/gpt/mini/train.log").read_text()
    assert "\r" not in log and "Loading weights" not in log
    assert re.search(r"extract: (\d+)/\1 sentences \(100%\)", log)
    decoding = (workdir / "logs/decode_predictions/gpt/mini.log").read_text()
    assert "decode: 3/3 layers (100%)" in decoding  # layers 0..2, every method
    # the run ends by saying where its results are and how to get the report
    assert "jtc: done. Tables: results/metrics/" in tiny_first_run.stderr
    assert "--report results/report.html" in tiny_first_run.stderr
    assert ran["decode_predictions"] == 2 and ran["prediction_table"] == 2  # every method in one
    assert ran["plot_prediction"] == 2 and ran["prediction_examples"] == 2
    assert ran["early_exit"] == 2 and ran["plot_early_exit"] == 2

    table = pq.read_table(workdir / "results/metrics/gpt/mini/r2.parquet").to_pandas()
    assert list(table.columns) == [
        "model",
        "corpus",
        "method",
        "source_layer",
        "target_layer",
        "r2",
    ]
    assert len(table) == 2 * 3  # (id, mat) x pairs l < l' of 3 sites
    assert (workdir / "results/metrics/gpt/mini/r2.csv").exists()
    for model in ("gpt", "bert"):  # one panel per method
        for ext in ("png", "pdf"):
            assert (workdir / f"results/figures/{model}/mini/r2.{ext}").stat().st_size
    for model in ("gpt", "bert"):
        prediction = pq.read_table(workdir / f"results/metrics/{model}/mini/prediction.parquet")
        rows = prediction.to_pylist()
        assert len(rows) == 2 * 3 * 6  # (id, mat) x layers 0..2 x 6 metrics
        assert {r["metric"] for r in rows} == {
            "precision@1",
            "precision@5",
            "precision@10",
            "surprisal",
            "kl",
            "cross_entropy",
        }
        for r in rows:
            assert r["n"] > 0 and r["ci_low"] <= r["mean"] <= r["ci_high"]
            if r["layer"] == 2 and r["metric"] == "precision@1":
                assert r["mean"] == 1.0
        assert (workdir / f"results/figures/{model}/mini/prediction.png").stat().st_size
        assert "## Sentence" in (workdir / f"results/metrics/{model}/mini/examples.md").read_text()
        sweep = pq.read_table(workdir / f"results/metrics/{model}/mini/early_exit.parquet")
        confident = [r for r in sweep.to_pylist() if r["policy"] == "confidence"]
        # (id, mat) x the full and shortlist checks x 125 λ x the check intervals 1 and 4
        assert len(confident) == 2 * 2 * 125 * 2 and min(r["mean_layers"] for r in confident) == 1
        assert {r["check"] for r in confident} == {"full", "shortlist"}
        assert all(0 < r["macs_percent"] for r in confident)
        assert max(r["accuracy"] for r in confident) == 1.0
        saved = pq.read_table(workdir / f"results/metrics/{model}/mini/early_exit_savings.parquet")
        assert sorted(set(saved.column("target").to_pylist())) == [0.9, 0.95, 0.99]
        assert set(saved.column("selection").to_pylist()) == {"in_sample", "held_out"}
        assert (workdir / f"results/figures/{model}/mini/early_exit.pdf").stat().st_size


def test_nothing_changed_nothing_runs(tiny_run, tmp_path):
    copy_run(tiny_run, tmp_path)
    again = run_snakemake(tmp_path, "all")
    assert rules_run(again) == {}, again.stderr[-2000:]
    assert "Nothing to be done" in again.stdout + again.stderr


def test_validation_size_reruns_only_what_reads_the_validation_split(tiny_run, tmp_path):
    maps = "results/maps/gpt/mini/mat.safetensors"
    ran = rerun_changed(tiny_run, tmp_path, sizes={"train": 48, "validation": 12})
    assert ran == VALIDATION_RERUN
    assert (tmp_path / maps).stat().st_mtime_ns == (tiny_run / maps).stat().st_mtime_ns
    assert (
        pq.read_table(tmp_path / "results/hidden/gpt/mini/validation/positions.parquet").num_rows
        == 12
    )


def test_training_size_reruns_the_fits_and_everything_after_them(tiny_run, tmp_path):
    ran = plan_changed(tiny_run, tmp_path, sizes={"train": 40, "validation": 16})
    assert ran == TRAINING_RERUN


def test_positions_per_sentence_reruns_the_training_states_and_what_reads_them(tiny_run, tmp_path):
    """positions_per_sentence: 3 extracts three rows per training sentence (the validation
    states stay, one row per sentence) and refits on them; the map files count both."""
    hidden = "results/hidden/gpt/mini/{split}/positions.parquet"
    assert rerun_changed(tiny_run, tmp_path, positions_per_sentence=3) == TRAINING_RERUN
    val = hidden.format(split="validation")
    assert (tmp_path / val).stat().st_mtime_ns == (tiny_run / val).stat().st_mtime_ns
    before = pq.read_table(tiny_run / hidden.format(split="train")).column("sentence_id")
    after = pq.read_table(tmp_path / hidden.format(split="train")).column("sentence_id")
    assert len(after) == 3 * len(before) and set(after.to_pylist()) == set(before.to_pylist())
    meta = read_metadata(tmp_path / "results/maps/gpt/mini/mat.safetensors")
    assert meta["n_train"] == len(before) and meta["training_rows"] == len(after)


def test_a_summary_setting_reruns_only_the_summary_and_its_figure(tiny_run, tmp_path):
    ran = plan_changed(tiny_run, tmp_path, prediction={"bootstrap": 200})
    assert ran == {"prediction_table": 2, "plot_prediction": 2, "headline_table": 1, "all": 1}


def test_an_early_exit_setting_reruns_only_the_sweep_and_its_figure(tiny_run, tmp_path):
    # (the confidences are not recomputed)
    ran = plan_changed(tiny_run, tmp_path, early_exit={"tau": 2.0})
    assert ran == {"early_exit": 2, "plot_early_exit": 2, "headline_table": 1, "all": 1}


def test_the_shortlist_settings_rerun_the_decoding_and_what_reads_it(tiny_run, tmp_path):
    # each setting alone, planned against the finished run (turning the shortlist off is run)
    # candidates: the checks decoding computes; the fitted factorisation stays
    ran = plan_changed(tiny_run, tmp_path, early_exit={"shortlist_candidates": 3})
    reads_scores = {
        "decode_predictions": 2,
        "prediction_table": 2,
        "plot_prediction": 2,
        "early_exit": 2,
        "plot_early_exit": 2,
        "headline_table": 1,
        "all": 1,
    }
    assert ran == reads_scores
    config = read_config(tmp_path)
    config["early_exit"] = {"shortlist_rank": 2}  # the factorisation, then the same
    write_config(tmp_path, config)
    assert rules_run(run_snakemake(tmp_path, "all", "-n")) == {"fit_shortlist": 2, **reads_scores}
    config["early_exit"]["shortlist_rank"] = 0  # off: no factorisation, no shortlist rows
    write_config(tmp_path, config)
    assert rules_run(run_snakemake(tmp_path, "all")) == reads_scores
    sweep = pq.read_table(tmp_path / "results/metrics/gpt/mini/early_exit.parquet")
    assert set(sweep.column("check").to_pylist()) == {"full", None}  # (fixed exits: none)


TRAINED = ["njtc", "nnjtc", "one_jump", "one_jump_selected", "tuned_lens"]


def test_trained_methods_reach_every_table_and_rerun_alone(tiny_run, tmp_path):
    from safetensors.numpy import load_file

    from jtc.shortcuts.maps import load_map, read_metadata

    # the finished tiny run, gpt only, the trained methods added: its model and states stay
    config = read_config(tiny_run)
    config["models"] = {"gpt": config["models"]["gpt"]}
    config["methods"] = ["id", "mat", "rrr", *TRAINED]
    config["training"] = {m: {"max_epochs": 3, "batch_size": 8} for m in TRAINED}
    copy_run(tiny_run, tmp_path, config)
    ran = rules_run(run_snakemake(tmp_path, "all"))
    assert not {"resolve_model", "prepare_corpus", "extract_hidden"} & set(ran), ran
    # one fit_map job for every method fitted from the states, one train_map job for the tuned
    # lens; 2 layers: njtc, nnjtc and rrr (NJTC's pairs) fit every pair (auto), the tuned lens
    # the pairs into the last
    assert ran["fit_map"] == 1 and ran["train_map"] == 1
    # training reports its progress in the job's log: pairs done, time, time left
    fit_log = (tmp_path / "logs/fit_map/gpt/mini.log").read_text()
    assert "train njtc: 3/3 layer pairs (100%)" in fit_log
    assert (
        "train tuned_lens: 2/2 layer pairs (100%)"
        in (tmp_path / "logs/train_map/gpt/mini/tuned_lens.log").read_text()
    )
    metrics = tmp_path / "results/metrics/gpt/mini"
    r2 = pq.read_table(metrics / "r2.parquet").to_pylist()
    pairs = {
        m: {(r["source_layer"], r["target_layer"]) for r in r2 if r["method"] == m}
        for m in ["rrr", *TRAINED]
    }
    assert pairs == {
        "rrr": {(0, 1), (0, 2), (1, 2)},
        "njtc": {(0, 1), (0, 2), (1, 2)},
        "nnjtc": {(0, 1), (0, 2), (1, 2)},
        "one_jump": {(0, 2), (1, 2)},
        "one_jump_selected": {(0, 2), (1, 2)},
        "tuned_lens": {(0, 2), (1, 2)},
    }
    assert all(np.isfinite(r["r2"]) for r in r2)
    for name in ("prediction", "early_exit", "early_exit_savings"):
        methods = set(pq.read_table(metrics / f"{name}.parquet").column("method").to_pylist())
        assert methods == {"id", "mat", "rrr", *TRAINED}, name
    assert all(f"| {m}, layer 1 |" in (metrics / "examples.md").read_text() for m in TRAINED)
    counts = {r["method"]: r for r in pq.read_table(metrics / "parameters.parquet").to_pylist()}
    assert counts["mat"]["parameters"] == 16 * 16 and counts["njtc"]["parameters"] == 2 * 16
    assert counts["rrr"]["parameters"] == 2 * 16  # rank 1, as NJTC's
    assert counts["nnjtc"]["parameters"] == 2 * 16 + 2 * 16 and counts["nnjtc"]["buffers"] == 32
    assert counts["tuned_lens"]["parameters"] == 16 * 16 + 16
    # one map for every layer: what early exit keeps is one map's parameters, not L maps'
    assert counts["one_jump"]["parameters"] == counts["nnjtc"]["parameters"]
    assert counts["one_jump"]["exit_parameters"] == counts["one_jump"]["parameters"]
    assert counts["nnjtc"]["exit_parameters"] == 2 * counts["nnjtc"]["parameters"]  # 0->2, 1->2
    assert counts["one_jump_selected"]["exit_parameters"] == counts["nnjtc"]["parameters"]
    one = tmp_path / "results/maps/gpt/mini/one_jump.safetensors"
    assert load_map(one, 0, 2).tensors.keys() == load_map(one, 1, 2).tensors.keys()
    assert all(
        np.array_equal(load_map(one, 0, 2).tensors[k], load_map(one, 1, 2).tensors[k])
        for k in load_map(one, 0, 2).tensors
    )
    # the selected map is N-NJTC's own map from the chosen layer (same settings, same seeds),
    # used from both layers
    selected = tmp_path / "results/maps/gpt/mini/one_jump_selected.safetensors"
    chosen = read_metadata(selected)["selected_source"]
    assert set(read_metadata(selected)["mean_cosine"]) == {"0", "1"}
    nnjtc_map = load_map(tmp_path / "results/maps/gpt/mini/nnjtc.safetensors", chosen, 2)
    for source in (0, 1):
        got = load_map(selected, source, 2).tensors
        assert got.keys() == nnjtc_map.tensors.keys()
        assert all(np.array_equal(got[k], nnjtc_map.tensors[k]) for k in got)
    assert (tmp_path / "results/figures/gpt/mini/r2.png").stat().st_size

    # one method's training setting: its fit_map job and what reads the maps, nothing else
    # (not the tuned lens); then nothing is left to do
    config["training"]["njtc"]["learning_rate"] = 0.02
    write_config(tmp_path, config)
    assert rules_run(run_snakemake(tmp_path, "all")) == {
        "fit_map": 1,
        "r2_table": 1,
        "plot_r2": 1,
        "parameter_table": 1,
        "decode_predictions": 1,
        "prediction_table": 1,
        "plot_prediction": 1,
        "prediction_examples": 1,
        "early_exit": 1,
        "plot_early_exit": 1,
        "headline_table": 1,
        "all": 1,
    }
    assert rules_run(run_snakemake(tmp_path, "all", "-n")) == {}
    # (the maps of these settings, for the same-seed check below; the header's key order is
    # not fixed by safetensors: compare tensors and metadata)
    nnjtc = tmp_path / "results/maps/gpt/mini/nnjtc.safetensors"
    first, first_meta = load_file(nnjtc), read_metadata(nnjtc)

    # NJTC's pairs are rrr's too, unless training.rrr sets its own (read from the r² table:
    # only the fits and the table are run)
    r2_target = str((metrics / "r2.parquet").relative_to(tmp_path))

    def pairs_of(method):
        r2 = pq.read_table(metrics / "r2.parquet").to_pylist()
        return {(r["source_layer"], r["target_layer"]) for r in r2 if r["method"] == method}

    config["training"]["njtc"]["targets"] = "last"
    write_config(tmp_path, config)
    ran = rules_run(run_snakemake(tmp_path, r2_target))
    assert ran == {"fit_map": 1, "r2_table": 1}  # (not train_map)
    assert pairs_of("njtc") == pairs_of("rrr") == {(0, 2), (1, 2)}
    assert pairs_of("nnjtc") == {(0, 1), (0, 2), (1, 2)}
    config["training"]["rrr"] = {"targets": "auto"}  # its own: every pair, as before
    write_config(tmp_path, config)
    run_snakemake(tmp_path, r2_target)
    assert pairs_of("njtc") == {(0, 2), (1, 2)} and pairs_of("rrr") == {(0, 1), (0, 2), (1, 2)}

    # back to the settings above: same seed, same maps, bit for bit
    config["training"]["njtc"].pop("targets")
    config["training"].pop("rrr")
    write_config(tmp_path, config)
    assert rules_run(run_snakemake(tmp_path, r2_target)) == {"fit_map": 1, "r2_table": 1}
    assert pairs_of("njtc") == pairs_of("rrr") == {(0, 1), (0, 2), (1, 2)}
    again = load_file(nnjtc)
    assert sorted(again) == sorted(first) and read_metadata(nnjtc) == first_meta
    assert all(np.array_equal(again[k], first[k]) for k in first)


def test_compute_settings_rerun_what_they_change(tiny_run, tmp_path):
    """device_map (where the model runs) reruns the jobs that run the model, not the cache;
    dtype (what the model is cached and run in) reruns the model's whole pipeline."""
    config = read_config(tiny_run)
    config["models"]["gpt"]["device_map"] = "auto"
    copy_run(tiny_run, tmp_path, config)
    # on a machine with a GPU (nvidia-smi faked): on one without, device_map is refused
    gpu = fake_nvidia_smi(tmp_path / "fake-bin")
    plan = rules_run(run_snakemake(tmp_path, "all", "-n", env=gpu))
    assert "resolve_model" not in plan and plan["extract_hidden"] == 2  # gpt's two splits
    config["models"]["gpt"].pop("device_map")
    config["models"]["gpt"]["dtype"] = "bfloat16"
    write_config(tmp_path, config)
    proc = run_snakemake(tmp_path, "all", "-n")
    assert rules_run(proc)["resolve_model"] == 1 and planned(proc, "model") == {"gpt"}


def test_submodule_shortcuts_run_and_rerun_alone(tiny_run, tmp_path):
    """Part maps, their r², every (variant, jump) run and the figure; enabling it reruns
    nothing else, and a new jump layer runs only that layer's jobs."""
    config = read_config(tiny_run)
    config["submodules"] = {"models": ["gpt"], "sentences": 10}
    copy_run(tiny_run, tmp_path, config)  # the finished run, and its record of how it ran
    ran = rules_run(run_snakemake(tmp_path, "all"))
    assert ran == {
        "record_parts": 2,
        "fit_parts": 1,  # every block's parts
        "part_r2_table": 1,
        "plot_part_r2": 1,
        "replace_parts": 1,  # jump layers 0 and 1, the 3 variants at each: one job
        "submodule_table": 1,
        "plot_submodules": 1,
        "all": 1,
    }
    replacing = (tmp_path / "logs/replace_parts/gpt/mini.log").read_text()
    assert "replace: 6/6 runs (100%)" in replacing  # 2 jump layers x 3 variants
    metrics = tmp_path / "results/metrics/gpt/mini"
    r2 = pq.read_table(metrics / "parts_r2.parquet").to_pylist()
    assert {(r["block"], r["part"]) for r in r2} == {
        (b, p) for b in (1, 2) for p in ("attn_norm", "attn", "ffn_norm", "ffn")
    }
    assert {r["module"] for r in r2} == {"ln_1", "attn", "ln_2", "mlp"}
    table = pq.read_table(metrics / "submodules.parquet").to_pylist()
    p1 = {(r["method"], r["layer"]): r for r in table if r["metric"] == "precision@1"}
    assert {m for m, _ in p1} == {"id", "mat", "mat_attn", "mat_ffn", "mat_ln"}
    assert {layer for m, layer in p1 if m.startswith("mat_")} == {0, 1}
    assert all(r["n"] == 10 for r in p1.values())
    assert p1[("id", 2)]["mean"] == 1.0  # the final layer is the model's own prediction
    assert (tmp_path / "results/figures/gpt/mini/submodules.png").stat().st_size

    config["submodules"]["jump_layers"] = [0, 1, 2]
    write_config(tmp_path, config)
    ran = rules_run(run_snakemake(tmp_path, "all"))
    assert ran == {
        "replace_parts": 1,
        "submodule_table": 1,
        "plot_submodules": 1,
        "all": 1,
    }
    table = pq.read_table(metrics / "submodules.parquet").to_pylist()
    at_last = [r for r in table if r["layer"] == 2 and r["metric"] == "precision@1"]
    assert {r["method"]: r["mean"] for r in at_last} == dict.fromkeys(
        ("id", "mat", "mat_attn", "mat_ffn", "mat_ln"), 1.0
    )
    surprisal = {
        r["method"]: r["mean"] for r in table if r["layer"] == 2 and r["metric"] == "surprisal"
    }
    assert surprisal["mat_attn"] == surprisal["mat_ffn"] == surprisal["id"]


PRUNING_RUN = {"calibrate_pruning": 1, "run_pruned": 1, "pruning_tables": 1, "plot_pruning": 1}


def test_depth_pruning_runs_reruns_alone_and_writes_a_smaller_model(tiny_run, tmp_path):
    """Every span of the tiny GPT-2 (2 blocks: length 1, starts 0 and 1), its tables, figures
    and headline columns; enabling it, or changing its settings, reruns nothing else; and
    `snakemake pruned` writes a checkpoint with one block that transformers loads."""
    config = read_config(tiny_run)
    config["pruning"] = {"models": ["gpt"], "calibration_sentences": 20, "evaluation_sentences": 6}
    copy_run(tiny_run, tmp_path, config)
    ran = rules_run(run_snakemake(tmp_path, "all"))
    assert ran == {**PRUNING_RUN, "headline_table": 1, "all": 1}
    metrics = tmp_path / "results/metrics/gpt/mini"
    spans = pq.read_table(metrics / "pruning_spans.parquet").to_pylist()
    # drop, mat and rrr from blocks 0 and 1, replaceme from block 1 only
    assert sorted((r["variant"], r["start"]) for r in spans) == [
        ("drop", 0),
        ("drop", 1),
        ("mat", 0),
        ("mat", 1),
        ("replaceme", 1),
        ("rrr", 0),
        ("rrr", 1),
    ]
    for r in spans:
        assert r["sentences"] == 6 and r["tokens"] > 6 and r["length"] == 1
        assert r["perplexity_ratio_low"] <= r["perplexity_ratio"] <= r["perplexity_ratio_high"]
        assert 0 <= r["top1_agreement"] <= 1 and r["kl"] >= 0
    selected = pq.read_table(metrics / "pruning_selected.parquet").to_pylist()
    assert {r["selection"] for r in selected} == {
        "angular_distance",
        "block_influence",
        "measured",
        "lowest_block_influence",
    }
    headline = pq.read_table(tmp_path / "results/metrics/headline.parquet").to_pylist()
    assert {r["pruning_variant"] for r in headline if r["model"] == "gpt"} - {None}
    for name in ("pruning_spans", "pruning_selection"):
        assert (tmp_path / f"results/figures/gpt/mini/{name}.png").stat().st_size

    config["pruning"]["evaluation_sentences"] = 5  # the runs and what reads them
    write_config(tmp_path, config)
    ran = rules_run(run_snakemake(tmp_path, "all"))
    evaluation = {k: v for k, v in PRUNING_RUN.items() if k != "calibrate_pruning"}
    assert ran == {**evaluation, "headline_table": 1, "all": 1}
    config["pruning"]["calibration_sentences"] = 24  # the calibration too
    write_config(tmp_path, config)
    assert rules_run(run_snakemake(tmp_path, "all")) == {
        **PRUNING_RUN,
        "headline_table": 1,
        "all": 1,
    }

    run_snakemake(tmp_path, "pruned")
    folder = tmp_path / "results/pruned/gpt/mini"
    from transformers import AutoModelForCausalLM

    pruned = AutoModelForCausalLM.from_pretrained(folder)
    assert pruned.config.num_hidden_layers == 1


def test_depth_pruning_of_a_masked_lm_is_refused_while_planning(tiny_run, tmp_path):
    config = read_config(tiny_run)
    config["pruning"] = {"models": ["bert"]}
    copy_run(tiny_run, tmp_path, config)
    proc = run_snakemake(tmp_path, "all", "-n", check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config key 'pruning.models': model 'bert' is a masked LM" in output
    assert rules_run(proc) == {}


def test_same_config_gives_identical_tables(tiny_run, tmp_path):
    reference = tiny_run / "results/metrics/bert/mini/r2.parquet"
    other = link_inputs(tiny_run, tmp_path / "again")
    write_config(other, read_config(tiny_run))
    run_snakemake(other, "results/metrics/bert/mini/r2.parquet")
    assert pq.read_table(reference).equals(
        pq.read_table(other / "results/metrics/bert/mini/r2.parquet")
    )


def test_bad_config_fails_before_any_job(tiny_project, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    config = read_config(tiny_project)
    config["sizes"]["validation"] = 0
    write_config(bad, config)
    proc = run_snakemake(bad, "all", check=False)
    assert proc.returncode != 0
    assert "config key 'sizes.validation'" in proc.stderr
    assert not (bad / "results").exists()


BAD_CONFIGS = [
    ({"sizes": {"train": 180, "validation": 40}}, "has at most 200 sentences, fewer than"),
    ({"prediction": {"example_layers": [5]}}, "layers [5] are outside 0..1 for model"),
    ({"early_exit": {"min_layer": 3}}, "'early_exit.min_layer': 3 is beyond the 2 layers"),
    ({"methods": ["id", "lowrank"]}, "config key 'methods.1'"),
    ({"training": {"tuned_lens": {"rank": 4}}}, "'rank' was unexpected"),
    ({"models": {"x": {"source": "/nonexistent/model", "predict": 1}}}, "models.x.predict"),
    ({"submodules": {"models": ["gpt2"]}}, "'submodules.models': ['gpt2'] not in 'models'"),
    ({"submodules": {"models": ["gpt"], "jump_layers": [3]}}, "layers [3] are outside 0..2"),
    ({"submodules": {"variants": ["mat_all"]}}, "config key 'submodules.variants.0'"),
]


@pytest.fixture(scope="module")
def bad_config_runs(request, tiny_project, tmp_path_factory):
    """The selected cases of test_bad_configs_fail_before_any_job, each config in its own
    folder, planned two at a time: {message: (folder, the run)}."""
    wanted = selected(request, "test_bad_configs_fail_before_any_job", "message")
    runs = {}
    for change, message in BAD_CONFIGS:
        if message in wanted:
            workdir = tmp_path_factory.mktemp("bad-config")
            write_config(workdir, {**read_config(tiny_project), **change})
            runs[message] = (workdir, ["all"], {"check": False})
    done = run_snakemake_all(runs)
    return {message: (runs[message][0], done[message]) for message in runs}


@pytest.mark.parametrize("change,message", BAD_CONFIGS)
def test_bad_configs_fail_before_any_job(bad_config_runs, change, message):
    workdir, proc = bad_config_runs[message]  # (`change` written to its config)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
    assert not (workdir / "results").exists()


def test_a_model_defined_twice_fails_before_any_job(tiny_project, tmp_path):
    text = (tiny_project / "config.yaml").read_text()
    text = text.replace(
        "models:\n", f"models:\n  bert:\n    source: {tiny_project / 'tiny-bert'}\n"
    )
    (tmp_path / "config.yaml").write_text(text)
    proc = run_snakemake(tmp_path, "all", check=False)
    assert proc.returncode != 0 and "config key 'bert': given twice" in proc.stderr
    assert not (tmp_path / "results").exists()


def test_prediction_from_a_bare_encoder_fails_while_planning(tiny_project, tmp_path):
    save_model("bert", tmp_path / "encoder", layers=2, width=16)
    config = read_config(tiny_project)
    config["models"] = {"enc": {"source": str(tmp_path / "encoder")}}
    write_config(tmp_path, config)
    proc = run_snakemake(tmp_path, "all", check=False)
    assert proc.returncode != 0
    assert "model 'enc' (BertModel) has no decoder head" in proc.stderr
    assert "masked-token prediction" in proc.stderr and "models.enc.predict: false" in proc.stderr
    assert not (tmp_path / "results").exists()
    config["models"]["enc"]["predict"] = False
    write_config(tmp_path, config)
    planned_run = run_snakemake(tmp_path, "all", "-n")
    assert "decode_predictions" not in planned_run.stdout and "extract_hidden" in planned_run.stdout


# --- a config given with --configfile replaces config/config.yaml -----------------------------

DEFAULT_MODELS = {"smollm2", "minilm", "tinybert"}
DEFAULT_CORPORA = {"news", "wiki"}
PAPER_MODELS = {
    "gpt2",
    "gpt2-medium",
    "gpt2-large",
    "gpt2-xl",
    "bert-base-uncased",
    "bert-large-uncased",
}
PAPER_CORPORA = {"leipzig_news", "leipzig_wiki"}
REPLACED = "Config file config/config.yaml is replaced by additional config"


def with_default_config(workdir):
    """The repository's config/ (config/config.yaml, the default experiment, and
    config/paper.yaml) copied into a working directory, as in a clone of the repository."""
    shutil.copytree(ROOT / "config", workdir / "config")
    assert (workdir / "config/config.yaml").is_file()
    return workdir


def test_paper_config_plans_offline_and_replaces_the_default(tmp_path):
    with_default_config(tmp_path)
    proc = run_snakemake(tmp_path, "all", "-n", configfile=tmp_path / "config/paper.yaml")
    out = proc.stdout + proc.stderr
    for model in ("gpt2", "gpt2-xl", "bert-large-uncased"):
        assert f"model={model}" in out
    assert "download_corpus" in out and "resolve_model" in out
    assert REPLACED in out
    # the paper's models and corpora, all of them and nothing of the default experiment
    assert planned(proc, "model") == PAPER_MODELS
    assert planned(proc, "corpus") == PAPER_CORPORA
    for name in DEFAULT_MODELS:
        assert f"model={name}" not in out and f"results/models/{name}" not in out
    for name in DEFAULT_CORPORA:
        assert f"results/corpora/{name}.parquet" not in out
    assert rules_run(proc)["resolve_model"] == 6 and rules_run(proc)["download_corpus"] == 2
    assert not (tmp_path / "results").exists()


def test_a_one_model_config_plans_only_that_model(tiny_project, tmp_path):
    with_default_config(tmp_path)
    config = read_config(tiny_project)
    config["models"] = {"gpt": config["models"]["gpt"]}
    write_config(tmp_path, config)
    proc = run_snakemake(tmp_path, "all", "-n")
    assert REPLACED in proc.stdout + proc.stderr
    assert planned(proc, "model") == {"gpt"}
    assert planned(proc, "corpus") == {"mini"}
    assert rules_run(proc)["resolve_model"] == 1 and rules_run(proc)["prepare_corpus"] == 1
    assert not (tmp_path / "results").exists()


def test_config_on_the_command_line_still_overrides_the_configfile(tiny_run, tmp_path):
    """--config sets single keys on top of the config file given with --configfile (which
    itself replaces config/config.yaml)."""
    work = with_default_config(copy_run(tiny_run, tmp_path))
    # the config file alone: the finished tiny run, nothing to do (had config/config.yaml been
    # merged in, its models would be planned)
    plain = run_snakemake(work, "all", "-n")
    assert rules_run(plain) == {}, plain.stderr[-2000:]
    # one key on the command line: what that key reruns, and only for the config file's models
    seeded = run_snakemake(work, "all", "-n", "--config", "seed=3")
    assert rules_run(seeded)["extract_hidden"] == 4
    assert planned(seeded, "model") == {"gpt", "bert"} and planned(seeded, "corpus") == {"mini"}
    # a list value: a method added, for the config file's models only
    more = run_snakemake(work, "all", "-n", "--config", "methods=[id, mat, njtc]")
    assert rules_run(more)["fit_map"] == 2  # one for each of the 2 models: mat and njtc
    assert planned(more, "model") == {"gpt", "bert"}
    listed = more.stdout + more.stderr
    assert all(f"results/maps/{m}/mini/njtc.safetensors" in listed for m in ("gpt", "bert"))
    # and it is checked like the file: a bad value is named by its key
    bad = run_snakemake(work, "all", "-n", "--config", "seed=-1", check=False)
    out = bad.stdout + bad.stderr  # (a dry run reports the error on stdout)
    assert bad.returncode != 0 and "config key 'seed': -1 is less than" in out, out[-2000:]
    assert rules_run(run_snakemake(work, "all", "-n")) == {}


# --- the report and the Python API on the finished tiny run -----------------------------------


@pytest.fixture(scope="module")
def tiny_report(_tiny_run, tmp_path_factory):
    """The shared tiny run's report (`snakemake --report`), made once for the tests that read
    it; making it changes nothing under the run's results/."""
    workdir, _ = _tiny_run
    report = tmp_path_factory.mktemp("report") / "report.html"
    before = snapshot(workdir)
    run_snakemake(workdir, "--report", str(report))
    assert snapshot(workdir) == before, "the report changed the shared tiny run"
    return report


def test_report_holds_every_figure_and_table(tiny_run, tiny_report):
    workdir = tiny_run
    html = tiny_report.read_text()
    figures = sorted((workdir / "results/figures").rglob("*.png"))
    tables = [
        workdir / f"results/metrics/{model}/mini/{name}"
        for model in ("gpt", "bert")
        for name in (
            "r2.html",
            "prediction.html",
            "early_exit.html",
            "early_exit_savings.html",
            "examples.html",
            "parameters.html",
        )
    ]
    assert len(figures) == 2 * 3  # per model: r2, prediction, early_exit
    for path in figures + tables:
        assert str(path.relative_to(workdir)) in html, path
        assert path.stat().st_size
    assert "How well each shortcut method predicts" in html  # captions are rendered
    # the landing page states the experiment from the config
    assert "Linear shortcuts between transformer layers" in html
    assert re.search(r"Models: (bert, gpt|gpt, bert)\.", html) and "Methods: id, mat." in html
    # one labelling scheme: every item is a table or a figure, named by what it shows
    assert '"kind"' in html and '"result"' in html
    assert '"table": ' not in html and '"figure": ' not in html


# each table the report lists (by its label), and the Parquet file its page shows
REPORT_TABLES = {
    "r² of every layer pair": "r2",
    "prediction metrics by layer": "prediction",
    "example predictions": "examples",
    "early exit: λ sweep and fixed exits": "early_exit",
    "early exit: layers saved": "early_exit_savings",
    "parameters per method": "parameters",
}
SHOW = """(() => {{ const row = Array.from(document.querySelectorAll('tr'))
    .find(r => r.cells.length > 1 && r.cells[1].innerText.trim() === {label!r});
  if (!row) return false; row.querySelector('a[iconname=eye]').click(); return true; }})()"""
OPEN_CATEGORY = """(() => {{ const a = Array.from(document.querySelectorAll('a'))
  .find(a => a.innerText.trim() === {name!r});
  if (!a) return false; a.click(); return true; }})()"""


def shown_page(browser, category, label):
    """The text of the table `label` of `category` as the report shows it: the report opened,
    the category clicked in the menu, the row's eye button clicked, the page's frame read."""
    from browser import BrowserError

    browser.evaluate("location.reload()")
    browser.wait_for_event("Page.loadEventFired")
    browser.wait_until(OPEN_CATEGORY.format(name=category))
    browser.wait_until(SHOW.format(label=label))
    for _ in range(100):  # until the page's frame has loaded its data: URL
        frames = [f for f in browser.child_frames() if f.get("url", "").startswith("data:")]
        try:
            text = frames and browser.evaluate("document.body.innerText", frames[0]["id"])
        except BrowserError:  # (the frame navigated while it was read: read it again)
            text = ""
        if text:
            return text
        time.sleep(0.1)
    raise BrowserError(f"no page shown for {category}: {label}")


def test_report_read_in_a_browser_shows_every_table_and_the_headline_numbers(tiny_run, request):
    """A person's view: the report opened in headless Chromium, every table clicked open."""
    from browser import Browser, find_chromium

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium (bash tests/install_chromium.sh installs it)")
    workdir = tiny_run
    report = request.getfixturevalue("tiny_report")  # (made only where Chromium is)
    headline = pq.read_table(workdir / "results/metrics/headline.parquet").to_pylist()
    assert {(r["model"], r["method"]) for r in headline} == {
        (m, method) for m in ("gpt", "bert") for method in ("id", "mat")
    }
    with Browser(chromium) as browser:
        browser.open(report)
        landing = browser.wait_until(
            "document.body.innerText.includes('Headline numbers') && document.body.innerText"
        )
        # the landing page: the experiment, and each model's numbers read from results/
        assert re.search(r"Models: (bert, gpt|gpt, bert)\.", landing)
        assert "Methods: id, mat." in landing
        for row in headline:
            assert f"{row['model']} on {row['corpus']}" in landing
            assert f"{row['r2_middle_to_last']:.3f}" in landing
            assert f"From layer {row['middle_layer']} of {row['layers']}" in landing
            p1 = f"{100 * row['precision1_middle']:.1f}"
            assert f"**{p1}%**" not in landing and f"{p1}%" in landing  # (rendered bold)
        for model in ("gpt", "bert"):
            for label, name in REPORT_TABLES.items():
                shown = shown_page(browser, model, label)
                table = pq.read_table(workdir / f"results/metrics/{model}/mini/{name}.parquet")
                first = table.slice(0, 1).to_pylist()[0]
                if name == "examples":  # a page per sentence, with each method's top-5
                    assert f"Sentence {first['sentence_id']}" in shown, shown[:500]
                    assert first["token"].strip() in shown
                    continue
                assert f"{table.num_rows} rows" in shown, (model, label, shown[:300])
                header = next(line for line in shown.splitlines() if line.startswith("model\t"))
                assert header.split("\t") == table.column_names, (model, label, header)
                assert f"{model}\tmini\t{first['method']}" in shown, (model, label)
        shown = shown_page(browser, "summary", "headline numbers")
        assert f"{len(headline)} rows" in shown
        assert all(f"{r['r2_middle_to_last']:.4g}" in shown for r in headline)


def python_example(path, heading):
    """The Python example of a Markdown file after its paragraph that starts with `heading`."""
    text = path.read_text()
    start = text.index("```python", text.index(heading)) + len("```python")
    return text[start : text.index("```", start)]


def test_readme_api_example_runs(tiny_run, tmp_path):
    workdir = tiny_run
    code = python_example(ROOT / "README.md", "**Python API**").replace(
        'RESULTS, MODEL, CORPUS = "results", "smollm2", "news"',
        f'RESULTS, MODEL, CORPUS = "{workdir / "results"}", "gpt", "mini"',
    )
    assert str(workdir) in code
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "lens.png").stat().st_size and (tmp_path / "shared/maps").is_dir()


def test_api_reproduces_the_workflow_numbers(tiny_run, tmp_path):
    from jtc.api import Lens, ShortcutMismatch, Shortcuts
    from jtc.cli import main
    from jtc.data.states import read_aligned, read_states
    from jtc.model.cache import load_cached
    from jtc.shortcuts.quality import r2_score

    workdir = tiny_run
    results = workdir / "results"
    exported = Shortcuts.from_results(results, "gpt", "mini", "mat").export(
        tmp_path / "shared", results=results
    )
    mat = Shortcuts.load(exported)
    description = yaml.safe_load((exported / "description.json").read_text())
    n_train = yaml.safe_load((workdir / "config.yaml").read_text())["sizes"]["train"]
    assert description["model"] == "gpt" and description["fit_statistics"]["n_train"] == n_train
    solvers = description["fit_statistics"]["solvers"]  # per source layer
    assert set(solvers) == {"0", "1"} and set(solvers.values()) <= {"cholesky", "pinv"}
    assert set(description["fit_statistics"]["validation_r2"]) == {"0->1", "0->2", "1->2"}
    val = results / "hidden/gpt/mini/validation"
    ids, h0 = read_states(val, 0)
    h2 = read_aligned(val, 2, ids)
    r2 = pq.read_table(results / "metrics/gpt/mini/r2.parquet").to_pylist()
    want = next(
        r["r2"]
        for r in r2
        if r["method"] == "mat" and (r["source_layer"], r["target_layer"]) == (0, 2)
    )
    assert r2_score(h2, mat.apply(h0, source=0)) == want

    # Precision@1 of mat from layer 1, through the API's head, equals the workflow's table
    net, tokenizer, info = load_cached(results / "models/gpt")
    lens = Lens(net, tokenizer, info, [mat])
    h1 = read_aligned(val, 1, ids, np.float32)
    final = read_aligned(val, 2, ids, np.float32)
    import torch

    with torch.no_grad():
        mapped = torch.tensor(mat.apply(h1, source=1), dtype=torch.float32)
        shortcut_top1 = lens.head.logits(mapped).argmax(1).numpy()
        final_top1 = lens.head.logits(torch.tensor(final)).argmax(1).numpy()
    prediction = pq.read_table(results / "metrics/gpt/mini/prediction.parquet").to_pylist()
    table_p1 = next(
        r["mean"]
        for r in prediction
        if (r["method"], r["layer"], r["metric"]) == ("mat", 1, "precision@1")
    )
    assert np.mean(shortcut_top1 == final_top1) == pytest.approx(table_p1, abs=1e-12)

    # a model of another depth or width is refused
    depth = r"\(num_layers 2\); the model given has num_layers 5"
    with pytest.raises(ShortcutMismatch, match=depth):
        mat.check_model({**info, "num_layers": 5})
    with pytest.raises(ShortcutMismatch, match="width 7"):
        mat.apply(np.zeros((3, 7)), source=0)
    with pytest.raises(ShortcutMismatch, match="not a jtc shortcut export"):
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad/description.json").write_text('{"format": "other"}')
        Shortcuts.load(tmp_path / "bad")

    # the lens view and the command
    text = "the king of the city was known for"
    table = lens.predictions(text, k=3).to_pylist()
    tokens = len(tokenizer(text)["input_ids"])
    assert len(table) == 1 * 3 * tokens * 3  # method × layers × positions × k
    out = tmp_path / "lens.png"

    def lens_command(corpus):
        args = [*args_for(results)[:-1], corpus]
        return main(["lens", *args, "--text", text, "--out", str(out)])

    assert lens_command("mini") == 0 and out.stat().st_size
    assert lens_command("nope") == 2  # no maps fitted on that corpus: a message, not a trace
    assert main(["export", *args_for(results), "--out", str(tmp_path / "cli-export")]) == 0
    assert Shortcuts.load(tmp_path / "cli-export").weight(0, 2).shape == (16, 16)


def args_for(results):
    return ["--results", str(results), "--model", "gpt", "--corpus", "mini"]


def test_bad_config_changes_nothing_in_existing_results(tiny_run, tmp_path):
    workdir = copy_run(tiny_run, tmp_path / "work")
    before = {p: p.stat().st_mtime_ns for p in (workdir / "results").rglob("*")}
    unknown = tmp_path / "t5"
    unknown.mkdir()
    (unknown / "config.json").write_text(
        '{"model_type": "t5", "architectures": ["T5Model"], "is_encoder_decoder": true}'
    )
    config = read_config(workdir)
    config["models"]["t5"] = {"source": str(unknown)}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(config))
    proc = run_snakemake(workdir, "all", configfile=tmp_path / "bad.yaml", cores=1, check=False)
    assert proc.returncode != 0
    assert "model 't5': architecture 't5' is an encoder-decoder model" in proc.stderr
    after = {p: p.stat().st_mtime_ns for p in (workdir / "results").rglob("*")}
    assert after == before


def _typo_source(config):
    config["models"]["gpt"]["source"] += "-typo"


def _set(*keys, value):
    def change(config):
        node = config
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    return change


def _with_njtc(**settings):
    def change(config):
        config["methods"] = ["id", "mat", "njtc"]
        config["training"] = {"njtc": settings}

    return change


# settings that cannot work, each refused while planning with its key named (before, each made
# Snakemake delete the outputs it was about to rebuild, or gave wrong tables at exit 0)
IMPOSSIBLE = {
    "model path typo": (_typo_source, "models.gpt.source"),
    "validation_fraction nan": (
        _set("validation_fraction", value=float("nan")),
        "validation_fraction",
    ),
    "confidence_level nan": (
        _set("prediction", "confidence_level", value=float("nan")),
        "prediction.confidence_level",
    ),
    "tau nan": (_set("early_exit", "tau", value=float("nan")), "early_exit.tau"),
    "tau inf": (_set("early_exit", "tau", value=float("inf")), "early_exit.tau"),
    "learning_rate nan": (_with_njtc(learning_rate=float("nan")), "training.njtc.learning_rate"),
    "weight_decay inf": (_with_njtc(weight_decay=float("inf")), "training.njtc.weight_decay"),
    "rank above the width": (_with_njtc(rank=1000), "training.njtc.rank"),
}


@pytest.fixture(scope="module")
def impossible_runs(request, _tiny_run, tmp_path_factory):
    """The selected cases of test_an_impossible_setting_leaves_results_byte_identical, each in
    its own copy of the finished tiny run, run two at a time: {case: (copy, its results' files
    and their contents before the run, the run)}."""
    finished, _ = _tiny_run
    runs, before = {}, {}
    test = "test_an_impossible_setting_leaves_results_byte_identical"
    for case in selected(request, test, "case"):
        change, _ = IMPOSSIBLE[case]
        workdir = copy_run(finished, tmp_path_factory.mktemp("impossible") / "work")
        files = snapshot(workdir)
        before[case] = (files, {p: (workdir / p).read_bytes() for p in files})
        config = read_config(workdir)
        change(config)
        write_config(workdir, config)
        runs[case] = (workdir, ["all"], {"check": False})
    done = run_snakemake_all(runs)
    return {case: (runs[case][0], *before[case], done[case]) for case in runs}


@pytest.mark.parametrize("case", list(IMPOSSIBLE))
def test_an_impossible_setting_leaves_results_byte_identical(impossible_runs, case):
    _, key = IMPOSSIBLE[case]
    workdir, before, contents, proc = impossible_runs[case]
    assert proc.returncode != 0
    assert f"config key '{key}'" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]
    assert snapshot(workdir) == before
    assert all((workdir / p).read_bytes() == data for p, data in contents.items())


# --- the smoke experiment: every stage on the real packaged models ----------------------------

SMOKE = ROOT / ".test/config/config.yaml"
EVERY_STAGE = {
    "prepare_corpus",
    "resolve_model",
    "extract_hidden",
    "fit_map",
    "train_map",
    "r2_table",
    "plot_r2",
    "parameter_table",
    "fit_shortlist",
    "decode_predictions",
    "prediction_table",
    "plot_prediction",
    "prediction_examples",
    "early_exit",
    "plot_early_exit",
    "record_parts",
    "fit_parts",
    "part_r2_table",
    "plot_part_r2",
    "replace_parts",
    "submodule_table",
    "plot_submodules",
    "calibrate_pruning",
    "run_pruned",
    "pruning_tables",
    "plot_pruning",
    "all",
}


@pytest.mark.real_model
def test_smoke_experiment_runs_every_stage(tmp_path):
    smoke = yaml.safe_load(SMOKE.read_text())
    shipped = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    assert smoke["models"] == shipped["models"]  # the default experiment's packaged models
    assert smoke["corpora"] == {"news": shipped["corpora"]["news"]}
    proc = run_snakemake(tmp_path, "all", configfile=SMOKE, timeout=1800)
    ran = rules_run(proc)
    assert EVERY_STAGE <= set(ran), sorted(EVERY_STAGE - set(ran))
    metrics = tmp_path / "results/metrics"
    predicting = [m for m, spec in smoke["models"].items() if spec.get("predict", True)]
    for model in smoke["models"]:
        r2 = pq.read_table(metrics / f"{model}/news/r2.parquet")
        assert r2.num_rows and np.isfinite(r2.column("r2").to_numpy()).all(), model
        methods = set(smoke["methods"]) - ({"tuned_lens"} if model not in predicting else set())
        assert set(r2.column("method").to_pylist()) == methods, model
        assert pq.read_table(metrics / f"{model}/news/parameters.parquet").num_rows, model
    for model in predicting:
        for name in ("prediction", "early_exit"):
            table = pq.read_table(metrics / f"{model}/news/{name}.parquet")
            assert table.num_rows, (model, name)
            assert set(table.column("method").to_pylist()) == set(smoke["methods"]), (model, name)
        # both checks on real weights (the shortlist's factorisation fitted to SmolLM2's head)
        sweep = pq.read_table(metrics / f"{model}/news/early_exit.parquet")
        assert {"full", "shortlist"} <= set(sweep.column("check").to_pylist()), model
        # (the layers saved by the methods that reach a target accuracy: maybe not all of them)
        saved = pq.read_table(metrics / f"{model}/news/early_exit_savings.parquet")
        assert set(saved.column("method").to_pylist()) <= set(smoke["methods"]), model
        assert "## Sentence" in (metrics / f"{model}/news/examples.md").read_text()
    for model in smoke["submodules"]["models"]:
        for name in ("parts_r2", "submodules"):
            assert pq.read_table(metrics / f"{model}/news/{name}.parquet").num_rows, (model, name)
    for figure in ("r2.png", "prediction.png", "early_exit.png", "submodules.png"):
        assert (tmp_path / "results/figures/smollm2/news" / figure).stat().st_size, figure
    # depth pruning on real weights, and the smaller checkpoint it writes
    selected = pq.read_table(metrics / "smollm2/news/pruning_selected.parquet").to_pylist()
    assert {r["variant"] for r in selected} == set(smoke["pruning"]["variants"])
    assert all(r["length"] == 8 and r["perplexity_ratio"] > 1 for r in selected)
    assert rules_run(run_snakemake(tmp_path, "pruned", configfile=SMOKE)) == {
        "export_pruned": 1,
        "pruned": 1,
    }
    written = json.loads((tmp_path / "results/pruned/smollm2/news/config.json").read_text())
    assert written["num_hidden_layers"] == 30 - 8

    # docs/outputs.md's own-model example: SmolLM2 from its source and exported maps, hooks
    from jtc.cli import main

    export = ["--results", str(tmp_path / "results"), "--model", "smollm2", "--corpus", "news"]
    assert main(["export", *export, "--out", str(tmp_path / "shared/smollm2-news-mat")]) == 0
    code = python_example(ROOT / "docs" / "outputs.md", "**Without a workflow folder.**")
    code += "\nassert tuple(h30.shape)[::2] == (1, 576), h30.shape\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "lens.png").stat().st_size
