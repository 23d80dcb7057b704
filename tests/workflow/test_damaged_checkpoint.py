"""A pruned checkpoint damaged after `snakemake pruned` (results/pruned/MODEL/CORPUS, its files
recorded in its stamp.json): a byte changed by an ordinary write is refused while any run
plans, naming the folder and the command that rebuilds it, and nothing under results/ changes;
a byte changed with its mtime put back passes planning and is refused by `snakemake pruned`,
which checks every file it hands over; deleting the folder and rerunning rebuilds it."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from damage import flip_byte
from harness import copy_run, read_config, rules_run, run_snakemake, snapshot

pytestmark = pytest.mark.workflow


def test_a_damaged_pruned_checkpoint_is_refused_and_rebuilt(tiny_run, tmp_path):
    config = read_config(tiny_run)
    config["pruning"] = {
        "models": ["gpt"],
        "calibration_sentences": 8,
        "evaluation_sentences": 4,
        "selected_sentences": 4,
        "context": {"lengths": [16], "windows": 2},  # (the tiny GPT-2 takes 64 positions)
    }
    work = copy_run(tiny_run, tmp_path, config)
    made = rules_run(run_snakemake(work, "pruned"))
    assert made == {"calibrate_pruning": 1, "export_pruned": 1, "pruned": 1}
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
