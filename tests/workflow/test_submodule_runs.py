"""Linear shortcuts across sub-modules in a copy of the tiny run: they run, and rerun alone."""

import pyarrow.parquet as pq
import pytest
from harness import copy_run, read_config, rules_run, run_snakemake, write_config

pytestmark = pytest.mark.workflow


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
