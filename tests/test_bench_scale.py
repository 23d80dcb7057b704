"""The scale benchmark (bench/scale_model.py, bench/bench_scale.py): the named shapes have their
real models' parameter counts, a model folder is deterministic from the seed and loads, and the
benchmark runs a whole experiment through Snakemake on the tiny shape and reports every rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_gpu import fake_nvidia_smi
from tiny import make_tokenizer, write_sentences

from jtc import paths

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

import scale_model  # noqa: E402

# published parameter counts of the real models (Phi-3-mini written in the llama layout: the same
# parameters, split q/k/v and gate/up matrices)
PUBLISHED = {
    "smollm2-1.7b": 1.71e9,
    "llama-2-7b": 6.74e9,
    "gpt2-xl": 1.558e9,
    "phi-3-mini": 3.821e9,
}


@pytest.fixture
def tokenizer_dir(tmp_path):
    folder = tmp_path / "tokenizer"
    make_tokenizer("causal").save_pretrained(folder)
    return folder


@pytest.mark.parametrize("shape", sorted(PUBLISHED))
def test_shape_has_the_real_parameter_count(shape):
    # built on the meta device: no memory, no weights
    assert scale_model.parameter_count(shape) == pytest.approx(PUBLISHED[shape], rel=0.005)


def test_tiny_model_is_deterministic_and_loads(tmp_path, tokenizer_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    made = [
        scale_model.make_model("tiny", tmp_path / name, tokenizer_dir, "float32", "cpu", seed=3)
        for name in ("a", "b")
    ]
    first, second = (tmp_path / name / "model.safetensors" for name in ("a", "b"))
    assert first.read_bytes() == second.read_bytes()
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "a")
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 2
    assert model.config.vocab_size == made[0]["vocab_size"] >= len(tokenizer)
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        assert 0 <= getattr(model.config, key) < len(tokenizer)
    assert made[0]["parameters"] == sum(p.numel() for p in model.parameters())


@pytest.mark.workflow
def test_scale_benchmark_runs_the_experiment_and_reports_every_rule(tmp_path, tokenizer_dir):
    start = time.perf_counter()
    model_dir, workdir = tmp_path / "tiny-model", tmp_path / "work"
    text = write_sentences(tmp_path / "text.txt", 120)
    make = [sys.executable, str(BENCH / "scale_model.py"), "tiny", str(model_dir)]
    make += ["--tokenizer", str(tokenizer_dir), "--dtype", "float32", "--device", "cpu"]
    proc = subprocess.run(make, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "parameters" in proc.stdout

    report_file = tmp_path / "report.json"
    bench = [sys.executable, str(BENCH / "bench_scale.py"), "--model-dir", str(model_dir)]
    bench += ["--workdir", str(workdir), "--text", str(text), "--json", str(report_file)]
    bench += ["--train", "60", "--validation", "20", "--methods", "id,mat", "--max-tokens", "16"]
    bench += ["--cores", "2", "--threads", "1", "--submodule-jumps", "0", "--dtype", "float32"]
    bench += ["--bootstrap", "10", "--batch-size", "16", "--quiet"]
    # nvidia-smi for a machine without a GPU: a 100,000 MiB GPU at 37% holding 2,048 MiB, and
    # every running workflow job holding 123 MiB of it
    env = {**os.environ, **fake_nvidia_smi(tmp_path / "fake-bin", memory_mib=100_000)}
    proc = subprocess.run(bench, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    report = json.loads(report_file.read_text())
    assert report["exit_status"] == 0
    assert report["wall_seconds"] > 0
    for rule in ("extract_hidden", "fit_map", "r2_table", "decode_predictions"):
        entry = report["rules"][rule]
        assert entry["jobs"] > 0 and entry["seconds"] > 0, (rule, entry)
        assert rule in proc.stdout
    assert report["rules"]["extract_hidden"]["jobs"] == 2  # train and validation
    assert report["rules"]["fit_map"]["jobs"] == 1  # one per method fitted in closed form
    assert "wall time:" in proc.stdout
    # the GPU as nvidia-smi tells it: sampled over the run, and each rule's jobs seen on it
    gpu = report["gpu"]
    assert gpu["samples"] > 0 and gpu["utilization_mean_pct"] == 37
    assert gpu["memory_peak_mib"] == 2048
    assert gpu["rule_peak_mib"].get("extract_hidden") == 123, gpu["rule_peak_mib"]
    assert set(gpu["rule_peak_mib"]) <= set(report["rules"]) and set(
        gpu["rule_peak_mib"].values()
    ) == {123}
    # the share of the GPU the workflow gave each GPU job: 1% of 100,000 MiB for a tiny model
    for rule in ("extract_hidden", "fit_map", "r2_table", "decode_predictions"):
        assert report["rules"][rule]["gpu_share_pct"] == 1, rule
    assert report["rules"]["plot_r2"]["gpu_share_pct"] is None  # no GPU
    r2 = workdir / paths.metric("r2.parquet").format(model="tiny-model", corpus="text")
    assert r2.is_file() and report["r2_table"] == str(r2)
    assert (
        workdir
        / paths.metric("early_exit_savings.parquet").format(model="tiny-model", corpus="text")
    ).is_file()
    print(f"scale benchmark test: {time.perf_counter() - start:.1f} s")
