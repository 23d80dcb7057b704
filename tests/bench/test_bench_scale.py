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

ROOT = Path(__file__).resolve().parents[2]
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
    # each rule that asks for memory: its requests beside the peak RSS its jobs reached
    memory = report["memory"]
    assert {"extract_hidden", "fit_map", "r2_table", "decode_predictions"} <= set(memory)
    assert "plot_r2" not in memory  # asks for no memory
    hidden = memory["extract_hidden"]
    assert hidden["jobs"] == 2 and all(r >= 100 for r in hidden["requests_mb"])
    assert hidden["peak_mb"] > 50 and hidden["sampled_mb"] > 50 and hidden["ok"] is not None
    assert "memory requests:" in proc.stdout
    r2 = workdir / paths.metric("r2.parquet").format(model="tiny-model", corpus="text")
    assert r2.is_file() and report["r2_table"] == str(r2)
    assert (
        workdir
        / paths.metric("early_exit_savings.parquet").format(model="tiny-model", corpus="text")
    ).is_file()
    print(f"scale benchmark test: {time.perf_counter() - start:.1f} s")


SNAKEMAKE_LOG = """\
[Fri Nov 27 10:04:38 2026]
localcheckpoint resolve_model:
    output: results/models/m
    log: logs/resolve_model/m.log
    jobid: 4
    benchmark: benchmarks/resolve_model/m.tsv
    reason: Missing output files: results/models/m
    wildcards: model=m
    resources: tmpdir=/tmp, runtime=17, mem_mb=6300, mem=6.3 GB, mem_mib=6009
DAG of jobs will be updated after completion.
[Fri Nov 27 10:04:39 2026]
rule extract_hidden:
    output: results/hidden/m/c/train
    jobid: 5
    benchmark: benchmarks/extract_hidden/m/c/train.tsv
    resources: tmpdir=/tmp, mem_mb=2000, mem_mib=1908, runtime=10
[Fri Nov 27 10:04:39 2026]
rule extract_hidden:
    output: results/hidden/m/c/validation
    jobid: 6
    benchmark: benchmarks/extract_hidden/m/c/validation.tsv
    resources: tmpdir=/tmp, mem_mb=1000, mem_mib=954, runtime=10
[Fri Nov 27 10:04:40 2026]
rule prediction_examples:
    output: results/metrics/m/c/examples.parquet
    jobid: 7
    resources: tmpdir=/tmp, mem_mb=3000, mem_mib=2862, runtime=10
[Fri Nov 27 10:04:40 2026]
rule fit_parts:
    output: results/maps/m/c/parts.safetensors
    jobid: 8
    resources: tmpdir=/tmp, mem_mb=900, mem_mib=859, runtime=10
localrule plot_r2:
    output: results/figures/m/c/r2.png
    jobid: 9
    benchmark: benchmarks/plot_r2/m/c.tsv
    resources: tmpdir=/tmp
"""


def _benchmark(path: Path, max_rss: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"s\th:m:s\tmax_rss\tmax_vms\n1.0\t0:00:01\t{max_rss}\t9000\n")


def test_memory_check_sets_each_jobs_peak_beside_its_request(tmp_path):
    import bench_scale

    lines = SNAKEMAKE_LOG.splitlines()
    blocks = bench_scale.job_blocks(lines)
    assert [(b["rule"], b["mem_mb"]) for b in blocks] == [
        ("resolve_model", 6300),
        ("extract_hidden", 2000),
        ("extract_hidden", 1000),
        ("prediction_examples", 3000),
        ("fit_parts", 900),
        ("plot_r2", None),
    ]
    assert blocks[0]["benchmark"] == "benchmarks/resolve_model/m.tsv"
    assert blocks[3]["benchmark"] is None
    _benchmark(tmp_path / "benchmarks/resolve_model/m.tsv", "2900.5")  # 46%: too little used
    _benchmark(tmp_path / "benchmarks/extract_hidden/m/c/train.tsv", "1900")  # 95%
    _benchmark(tmp_path / "benchmarks/extract_hidden/m/c/validation.tsv", "600")  # 60%
    _benchmark(tmp_path / "benchmarks/plot_r2/m/c.tsv", "150")  # asks for nothing: not judged
    sampled = {"prediction_examples": 3100.0, "extract_hidden": 1950.0, "resolve_model": 3000.0}
    memory = bench_scale.memory_check(blocks, tmp_path, 0.0, sampled)
    assert set(memory) == {"resolve_model", "extract_hidden", "prediction_examples", "fit_parts"}
    hidden = memory["extract_hidden"]
    assert hidden["jobs"] == 2 and hidden["requests_mb"] == [2000, 1000]
    assert hidden["job_ratios"] == pytest.approx([0.95, 0.6])
    assert hidden["peak_mb"] == 1950 and hidden["ratio"] == pytest.approx(1950 / 2000)
    assert hidden["ok"] is True
    resolve = memory["resolve_model"]  # the high-water mark is the peak that max_rss missed
    assert resolve["peak_mb"] == 3000 and resolve["ok"] is False  # 48% of 6300
    examples = memory["prediction_examples"]  # no benchmark file: the sampled peak, over 100%
    assert examples["max_rss_mb"] == [] and examples["ok"] is False
    assert examples["ratio"] == pytest.approx(3100 / 3000)
    assert memory["fit_parts"]["ok"] is None  # neither a benchmark file nor a sample
    # a job over its own request fails its rule, whatever the rule's largest request
    _benchmark(tmp_path / "benchmarks/extract_hidden/m/c/validation.tsv", "1100")
    memory = bench_scale.memory_check(blocks, tmp_path, 0.0, {})
    assert memory["extract_hidden"]["ratio"] == pytest.approx(0.95)
    assert memory["extract_hidden"]["ok"] is False
    # a benchmark file older than the run is not counted
    later = bench_scale.memory_check(blocks, tmp_path, time.time() + 60, {})
    assert later["extract_hidden"]["peak_mb"] is None and later["extract_hidden"]["ok"] is None


def test_the_rss_sampler_keeps_each_rules_peak(tmp_path):
    import bench_scale

    def process(pid: int, script: str, hwm_kb: int, workdir: str = "/w") -> None:
        folder = tmp_path / str(pid)
        folder.mkdir(exist_ok=True)
        argv = ["python", f"{workdir}/.snakemake/scripts/tmpab12.{script}.py"]
        argv = argv if script else ["bash"]
        (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (folder / "status").write_text(f"Name:\tpython\nVmHWM:\t{hwm_kb} kB\nVmRSS:\t1 kB\n")

    process(11, "fit_map", 1_000_000)
    process(12, "fit_map", 3_000_000)
    process(13, "", 9_000_000)  # not a job
    process(14, "fit_map", 9_000_000, "/other")  # another workflow's job
    sampler = bench_scale.RssSampler(Path("/w"), proc=tmp_path)
    sampler.sample()
    process(11, "fit_map", 4_000_000)  # its peak grew since
    sampler.sample()
    assert sampler.rule_peak_mb == {"fit_map": pytest.approx(4_096.0)}


def test_the_gpu_sampler_counts_only_the_jobs_of_its_own_workflow(tmp_path, monkeypatch):
    """nvidia-smi lists every process on the GPU; a job of another workflow (another working
    directory, here one whose name only starts like this one's) is not counted. Real processes
    that sleep with a job's command line, under the fake nvidia-smi."""
    import bench_scale

    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path / "fake-bin", process_mib=123)["PATH"])
    mine, other = tmp_path / "work", tmp_path / "work2"
    jobs = []
    try:
        for workdir, rule in [(mine, "extract_hidden"), (other, "replace_parts")]:
            workdir.mkdir()
            script = workdir / ".snakemake" / "scripts" / f"tmpab12.{rule}.py"
            sleep = [sys.executable, "-c", "import time; time.sleep(60)", str(script)]
            jobs.append(subprocess.Popen(sleep, cwd=workdir))
        sampler = bench_scale.GpuSampler(mine)
        sampler.sample_processes()
        assert sampler.rule_peak_mib == {"extract_hidden": 123.0}
        sampler = bench_scale.GpuSampler(other)
        sampler.sample_processes()
        assert sampler.rule_peak_mib == {"replace_parts": 123.0}
    finally:
        for job in jobs:
            job.kill()
            job.wait()
