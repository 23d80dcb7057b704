"""The speed benchmarks of bench/ run at a tiny size: random states or a tiny cached Llama in
place of SmolLM2, a small matmul for the peak. Each must still run against the code as it is
and print its comparison with a baseline or a roofline, with the numbers that comparison
implies."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from pruneable import TOKENIZER, make

from jtc.model.cache import cache_model

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import bench_decode  # noqa: E402
import bench_early_exit  # noqa: E402
import bench_extract  # noqa: E402
import bench_fit  # noqa: E402
import bench_head_check  # noqa: E402
import bench_submodules  # noqa: E402
import bench_train  # noqa: E402
import common  # noqa: E402


def numbers(pattern: str, text: str) -> list[float]:
    """Every number the groups of `pattern` match in `text` (lines: ^ and $), in order."""
    found = re.findall(pattern, text, re.M)
    assert found, f"no {pattern!r} in:\n{text}"
    return [float(x) for match in found for x in (match if isinstance(match, tuple) else [match])]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny Llama (5 blocks, width 32) in jtc's model cache, where the benchmarks look for
    SmolLM2's."""
    folder = tmp_path_factory.mktemp("bench_model")
    model, _ = make("llama")
    model.save_pretrained(folder / "src")
    TOKENIZER.save_pretrained(folder / "src")
    cache_model("tiny", {"source": str(folder / "src")}, folder / "cached")
    return folder / "cached"


@pytest.fixture
def small_peak(monkeypatch):
    """The fp32 matmul peak measured on 256 × 256 products (the benchmarks use 2048)."""
    for module in (bench_decode, bench_extract, bench_train):
        monkeypatch.setattr(
            module, "peak_matmul_gflops", lambda threads: common.peak_matmul_gflops(threads, 256)
        )


def test_fit_against_scikit_learn(capsys):
    argv = ["--states", "none", "--sites", "4", "--width", "16", "--rows", "60"]
    bench_fit.main([*argv, "--baseline-pairs", "2", "--threads", "1"])
    out = capsys.readouterr().out
    assert "4 sites x 16 wide, 60 training rows, 6 pairs" in out
    assert numbers(r"jtc: ([\d.]+) s for all pairs \(([\d.]+) ms a pair\)", out)
    assert numbers(r"scikit-learn: (\d+) ms a pair -> (\d+) s for all pairs", out)
    (speedup,) = numbers(r"speed-up: ([\d.]+)x", out)
    assert speedup > 0


def test_head_check_against_the_whole_file(capsys):
    """26 MB of blocks and a 0.5 MB head: checking the head alone reads a 50th of the file."""
    bench_head_check.main(["--scale", "0.002", "--vocab", "64"])
    out = capsys.readouterr().out
    assert "weights file: 0.03 GB (32 blocks at scale 0.002)" in out
    (whole,) = numbers(r"whole file checked \(before\): +([\d.]+) s", out)
    (less,) = numbers(r"-> ([\d.]+)× less", out)
    assert whole > 0 and less > 2


def test_early_exit_sweep_against_one_lambda(capsys, tmp_path, monkeypatch):
    """Without a default run (results/ missing) only the synthetic sweep is timed."""
    monkeypatch.chdir(tmp_path)
    bench_early_exit.main(["--threads", "1"])
    out = capsys.readouterr().out
    one, hundred, ratio = numbers(
        r"sweep, synthetic 3,000 × 49: 1 λ ([\d.]+) ms, 100 λ ([\d.]+) ms -> ratio ([\d.]+)", out
    )
    assert ratio == pytest.approx(hundred / one, rel=0.05, abs=0.02)
    assert "run the default workflow for the real-table measurements" in out


def test_training_time_on_synthetic_states(capsys, small_peak):
    argv = ["--synthetic", "--rows", "300", "--width", "200", "--vocab", "40"]
    bench_train.main([*argv, "--sources", "1", "2", "--device", "cpu", "--threads", "1"])
    out = capsys.readouterr().out
    assert "synthetic: 300 training rows, width 200, vocabulary 40" in out
    for method in ("rrr", "njtc", "nnjtc", "tuned_lens"):
        assert len(re.findall(rf"^{method} +[12] -> 30: ", out, re.M)) == 2, method
    # NJTC starts from rrr, the optimum of its training objective on all rows: not below it
    for extra in numbers(r"^njtc .*training MSE [\d.]+ \(rrr [\d.]+, ([+-][\d.]+)%\)", out):
        assert extra >= -0.01


def test_extraction_against_the_roofline(capsys, model_dir, small_peak):
    argv = ["--model-dir", str(model_dir), "--sentences", "16", "--batch-size", "4", "8"]
    bench_extract.main([*argv, "--threads", "1"])
    out = capsys.readouterr().out
    assert ", 16 sentences, " in out
    (roofline,) = numbers(r"-> roofline (\d+) tokens/s", out)
    rows = re.findall(r"batch +(\d+): +(\d+) tokens/s = +([\d.]+)% of roofline", out)
    assert [int(b) for b, _, _ in rows] == [4, 8]
    for _, rate, share in rows:
        assert float(share) == pytest.approx(100 * int(rate) / roofline, rel=0.02, abs=0.1)


def test_decoding_against_the_roofline(capsys, model_dir, small_peak):
    bench_decode.main(["--model-dir", str(model_dir), "--positions", "64", "--threads", "1"])
    out = capsys.readouterr().out
    assert "6 layers scored, 64 positions" in out  # h_0..h_5 of the 5-block model
    share, rate = numbers(r"decode: [\d.]+ s = (\d+)% of roofline \((\d+) position-layers/s\)", out)
    assert share >= 0 and rate > 0


def test_submodules_one_pass_against_one_per_jump_layer(capsys, model_dir):
    argv = ["--model-dir", str(model_dir), "--sentences", "6", "--jumps", "0", "3"]
    bench_submodules.main([*argv, "--batch-size", "4", "--threads", "1"])
    out = capsys.readouterr().out
    assert numbers(r"one pass ([\d.]+) s, one pass per jump layer ([\d.]+) s", out)
    runs = re.findall(r"^(\w+) +(\d+) +([\d.]+) +([\d.]+)$", out, re.M)
    assert {(variant, int(jump)) for variant, jump, _, _ in runs} == {
        (variant, jump) for variant in bench_submodules.VARIANTS for jump in (0, 3)
    }
