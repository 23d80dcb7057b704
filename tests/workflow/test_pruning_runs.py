"""Depth pruning in a copy of the tiny run: it runs alone and writes a smaller model,
whose damage is refused and repaired; a masked LM is refused while planning."""

import json
import os
import shutil

import pyarrow.parquet as pq
import pytest
from damage import flip_byte
from harness import copy_run, read_config, rules_run, run_snakemake, snapshot

pytestmark = pytest.mark.workflow


PRUNING_RUN = {"calibrate_pruning": 1, "run_pruned": 1, "pruning_tables": 1, "plot_pruning": 1}
# the literature's measures of the chosen spans (workflow/rules/measures.smk)
MEASURES_RUN = {"context_perplexity": 1, "generation_fidelity": 1, "measure_tables": 1}
MEASURES = {
    "context": {"lengths": [16], "windows": 2},
    "generation": {"prompts": 2, "new_tokens": 3},
}


def test_depth_pruning_runs_alone_and_writes_a_smaller_model(tiny_run, tmp_path):
    """Every span of the tiny GPT-2 (2 blocks: length 1, starts 0 and 1), its tables, figures
    and headline columns; enabling it reruns nothing else; and
    `snakemake pruned` writes a checkpoint with one block that transformers loads."""
    config = read_config(tiny_run)
    config["pruning"] = {
        "models": ["gpt"],
        "calibration": {"text": "windows", "windows": 4, "window_tokens": 16},
        "calibration_sentences": 20,
        "evaluation_sentences": 6,
        "selected_sentences": 8,
        "measures_in_all": True,
        # ShortGPT's blocks (lowest Block Influence) and UIDL's, dropped, measured beside
        "also_measure": ["drop@lowest_block_influence", "drop@angular_distance"],
        **MEASURES,
    }
    copy_run(tiny_run, tmp_path, config)
    ran = rules_run(run_snakemake(tmp_path, "all"))
    assert ran == {**PRUNING_RUN, **MEASURES_RUN, "headline_table": 1, "all": 1}
    metrics = tmp_path / "results/metrics/gpt/mini"
    spans = pq.read_table(metrics / "pruning_spans.parquet").to_pylist()
    # drop, mat and low_rank from blocks 0 and 1, replaceme from block 1 only
    assert sorted((r["variant"], r["start"]) for r in spans) == [
        ("drop", 0),
        ("drop", 1),
        ("low_rank", 0),
        ("low_rank", 1),
        ("mat", 0),
        ("mat", 1),
        ("replaceme", 1),
    ]
    for r in spans:
        assert r["sentences"] == 6 and r["tokens"] > 6 and r["length"] == 1
        assert r["perplexity_ratio_low"] <= r["perplexity_ratio"] <= r["perplexity_ratio_high"]
        assert 0 <= r["top1_agreement"] <= 1 and r["kl"] >= 0
    selected = pq.read_table(metrics / "pruning_selected.parquet").to_pylist()
    assert {r["sentences"] for r in selected} == {8}  # the selected sentences
    # calibrated on every token of 4 windows of 16 tokens of running text
    assert {r["calibration_tokens"] for r in spans} == {4 * 16}
    log = (tmp_path / "logs/calibrate_pruning/gpt/mini.log").read_text()
    assert "calibration text of gpt on mini: 4 windows × 16 tokens = 64 tokens, from " in log
    context = pq.read_table(metrics / "pruning_context.parquet").to_pylist()
    assert context[0]["variant"] == "full" and context[0]["perplexity_ratio"] == 1.0
    assert {r["context"] for r in context} == {16} and len(context) > 1
    generation = pq.read_table(metrics / "pruning_generation.parquet").to_pylist()
    assert generation[0]["agreement_share"] == 1.0 and generation[0]["prompts"] == 2
    assert {r["variant"] for r in generation} == {r["variant"] for r in context}
    chosen = {
        (r["variant"], r["selection"]): r["removed"] for r in selected if r["variant"] == "drop"
    }
    measured = [(r["variant"], r["selection"], r["removed"]) for r in context]
    assert measured[-2:] == [
        ("drop", rule, chosen[("drop", rule)])
        for rule in ("lowest_block_influence", "angular_distance")
    ]
    assert {r["selection"] for r in context[1:-2]} == {"measured"}
    assert [(r["variant"], r["selection"]) for r in generation] == [m[:2] for m in measured]
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

    # (what each pruning key reruns: tests/workflow/test_reruns.py, against config/README.md)

    assert rules_run(run_snakemake(tmp_path, "pruned")) == {"export_pruned": 1, "pruned": 1}
    folder = tmp_path / "results/pruned/gpt/mini"
    from transformers import AutoModelForCausalLM

    pruned = AutoModelForCausalLM.from_pretrained(folder)
    assert pruned.config.num_hidden_layers == 1
    refuses_a_damaged_checkpoint_and_rebuilds_it(tmp_path)


def test_depth_pruning_of_a_masked_lm_is_refused_while_planning(tiny_run, tmp_path):
    config = read_config(tiny_run)
    config["pruning"] = {"models": ["bert"]}
    copy_run(tiny_run, tmp_path, config)
    proc = run_snakemake(tmp_path, "all", "-n", check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config key 'pruning.models': model 'bert' is a masked LM" in output
    assert rules_run(proc) == {}


def refuses_a_damaged_checkpoint_and_rebuilds_it(work):
    """A pruned checkpoint damaged after `snakemake pruned` (its files recorded in its
    stamp.json): a byte changed by an ordinary write is refused while any run plans, naming the
    folder and the command that rebuilds it, and nothing under results/ changes; a byte changed
    with its mtime put back passes planning and is refused by `snakemake pruned`, which checks
    every file it hands over; deleting the folder and rerunning rebuilds it byte for byte."""
    folder = "results/pruned/gpt/mini"
    weights = work / folder / "model.safetensors"
    written, intact = weights.stat(), weights.read_bytes()
    recorded = json.loads((work / folder / "stamp.json").read_text())["files"]
    assert recorded["model.safetensors"]["bytes"] == len(intact)

    # a byte changed by an ordinary write: every run refuses it while planning
    flip_byte(weights, len(intact) - 3)
    before = snapshot(work)
    for target in ("all", "pruned"):
        refused = run_snakemake(work, target, check=False)
        assert refused.returncode != 0 and rules_run(refused) == {}, target
        assert f"{folder}/model.safetensors is not the file its job wrote" in refused.stderr
        rebuild = f"delete the folder {folder} and rerun the workflow (rm -r {folder}, then "
        assert rebuild + "`snakemake pruned`" in refused.stderr
    assert snapshot(work) == before

    # the same byte changed with the mtime put back: planning passes, `snakemake pruned` not
    weights.write_bytes(intact)
    os.utime(weights, ns=(written.st_atime_ns, written.st_mtime_ns))
    flip_byte(weights, len(intact) - 3, keep_mtime=True)
    failed = run_snakemake(work, "pruned", check=False)
    assert failed.returncode != 0 and rules_run(failed) == {"pruned": 1}
    assert f"{folder}/model.safetensors is not the file its job wrote" in failed.stderr
    assert f"rm -r {folder}" in failed.stderr

    # the command given: the checkpoint made again, the same bytes
    shutil.rmtree(work / folder)
    assert rules_run(run_snakemake(work, "pruned")) == {"export_pruned": 1, "pruned": 1}
    assert weights.read_bytes() == intact
