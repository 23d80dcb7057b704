"""GPU paths: every torch stage run once on the CPU and once on a CUDA device, with the same
results (marked cuda; skipped where no CUDA device is visible, e.g. in CI).

Each test runs a stage with a tiny model (2 layers, width 32) on the CPU and on DEVICE and
compares the two: states, part states, prefix and replaced states and scores within float32 GPU
tolerances; trained maps by shape, finiteness and a loss no worse than a loose bound over the
CPU's (GPU and CPU training are not bit-identical). A global forward pre-hook records the device
of every module call (its parameters, buffers and tensor arguments) during each run, so a test
also fails when the model, its head or a map module ran on the wrong device. The workflow
stages are run as jobs: one with CUDA hidden from it (a CPU job), one that sees this machine's
GPU, as jtc.model.cache.load_model and jtc.shortcuts.train decide.

JTC_TEST_DEVICE names the device compared with the CPU (default "cuda"). With
JTC_TEST_DEVICE=cpu the same tests run CPU against CPU, which checks the tests themselves on a
machine without a GPU: `JTC_TEST_DEVICE=cpu .venv/bin/python -m pytest tests/gpu/test_cuda.py`.
"""

import copy
import dataclasses
import itertools
import os
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pytest
import torch
from tiny import SENTENCES, make_model, save_model

from jtc.api import Lens, Shortcuts
from jtc.data.extract import prepare_sentences, run_states
from jtc.data.states import part_file, read_positions, read_site, read_states
from jtc.evaluation.decode import top_tokens
from jtc.evaluation.early_exit import layer_arrays, run_with_early_exit
from jtc.files.io import read_json, read_table, write_table
from jtc.model.adapters import PART_NAMES, adapter_of, get_adapter, part_adapter
from jtc.model.cache import cache_model, load_cached, model_info
from jtc.model.head import Head
from jtc.model.hooks import PartRecorder, part_sites
from jtc.model.scoring import final_reference, score
from jtc.shortcuts.lens import lens_loss
from jtc.shortcuts.maps import ShortcutMap, load_maps, read_metadata, save_maps, save_part_maps
from jtc.shortcuts.methods import METHODS
from jtc.shortcuts.parts import VARIANTS
from jtc.shortcuts.replace import prefix_states, replaced_final_states
from jtc.stages.fit import train_map
from jtc.stages.hidden import extract_hidden
from jtc.stages.prediction import decode_predictions
from jtc.stages.submodules import record_parts, replace_parts

DEVICE = torch.device(os.environ.get("JTC_TEST_DEVICE", "cuda"))
CPU = torch.device("cpu")
JOBS = (("cpu", CPU), ("device", DEVICE))

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        DEVICE.type == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device"
    ),
]

CLOSE = dict(rtol=1e-4, atol=1e-5)  # float32 on a GPU against float32 on the CPU
LAYERS, WIDTH = 2, 32
N_SENTENCES = 40  # of the tiny project the workflow-stage tests share
SAMPLING = dict(n=N_SENTENCES, seed=0, batch_size=5, max_tokens=32, dtype="float32")
TEXT = "the king of the city was known for his music"
KINDS = ["llama", "gpt2", "bert-mlm", "bert"]  # bert: a bare encoder (r² only, no head)
HEAD_KINDS = ["llama", "gpt2", "bert-mlm"]  # a head without a bias, GPT-2's, a masked LM's


# --- helpers -------------------------------------------------------------------------------


@contextmanager
def module_devices():
    """The device types of every module call made inside the block: of the module's own
    parameters and buffers and of its positional tensor arguments (all modules, all models)."""
    seen: set[str] = set()

    def hook(module, args):
        own = itertools.chain(module.parameters(recurse=False), module.buffers(recurse=False))
        tensors = (a for a in args if isinstance(a, torch.Tensor))
        seen.update(t.device.type for t in itertools.chain(own, tensors))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


@contextmanager
def job_on(device: torch.device):
    """A workflow job on `device`: on the CPU, CUDA is hidden from the job (as on a machine
    without a GPU); otherwise the job sees the machine's GPU and picks it itself. Yields the
    device types of the module calls the job made (module_devices)."""
    with pytest.MonkeyPatch.context() as patch, module_devices() as seen:
        if device.type == "cpu":
            patch.setattr(torch.cuda, "is_available", lambda: False)
        yield seen


def on_device(model):
    """A copy of `model` on DEVICE (the CPU original stays as it is)."""
    return copy.deepcopy(model).to(DEVICE)


def parameters_on(model) -> str:
    return next(model.parameters()).device.type


def sentence_table(texts):
    return pa.table({"sentence_id": np.arange(len(texts)), "text": texts})


def model_inputs(model, tokenizer, kind):
    """The inputs and drawn positions extraction builds for SENTENCES."""
    info = model_info(kind, model, tokenizer, "test")
    prepared, _ = prepare_sentences(tokenizer, info, sentence_table(SENTENCES), 0, 32)
    return prepared.inputs, prepared.positions


def near_identity(rng, scale=0.1, bias=False) -> dict[str, np.ndarray]:
    """The tensors of an affine map close to the identity (the states stay in range)."""
    tensors = {"weight": np.eye(WIDTH) + scale * rng.normal(size=(WIDTH, WIDTH))}
    if bias:
        tensors["bias"] = scale * rng.normal(size=WIDTH)
    return tensors


def assert_numpy(value, dtype=None):
    """An output the API promises as numpy: an ndarray in host memory."""
    assert isinstance(value, np.ndarray), type(value)
    if dtype is not None:
        assert value.dtype == dtype, value.dtype


def assert_same_scores(got, want):
    """Per-position scores (dicts of arrays or score tables) equal within CLOSE; ids exact."""
    if isinstance(want, pa.Table):
        assert got.column_names == want.column_names
        got = {c: got.column(c).to_numpy() for c in got.column_names}
        want = {c: want.column(c).to_numpy() for c in want.column_names}
    assert set(got) == set(want)
    for name, values in want.items():
        if values.dtype.kind in "fc":
            np.testing.assert_allclose(got[name], values, **CLOSE, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], values, err_msg=name)


def assert_same_states(got_dir, want_dir, files):
    """The same sentences, and states within CLOSE, in every file of two states folders."""
    for path in files:
        ids, states = read_site(got_dir / path, np.float32)
        want_ids, want = read_site(want_dir / path, np.float32)
        np.testing.assert_array_equal(ids, want_ids, err_msg=path)
        np.testing.assert_allclose(states, want, **CLOSE, err_msg=path)


# --- the library's torch functions, called directly ----------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_extraction_on_the_device_equals_the_cpu(kind):
    """run_states (extraction's forward pass) with the model on the device gives the CPU's
    h_0..h_L, as a numpy array."""
    model, tokenizer = make_model(kind, layers=LAYERS, width=WIDTH)
    adapter = get_adapter(model.config.model_type)
    inputs, positions = model_inputs(model, tokenizer, kind)
    on_cpu = run_states(model, adapter, inputs, positions, batch_size=3, pad_id=0)
    net = on_device(model)
    with module_devices() as seen:
        got = run_states(net, adapter, inputs, positions, batch_size=3, pad_id=0)
    assert seen == {DEVICE.type} and parameters_on(net) == DEVICE.type
    assert_numpy(got, np.float32)
    assert got.shape == (LAYERS + 1, len(inputs), WIDTH)
    np.testing.assert_allclose(got, on_cpu, **CLOSE)


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_part_recording_on_the_device_equals_the_cpu(kind):
    """The input and output of every block part, recorded with the model on the device, are
    the CPU's."""
    model, tokenizer = make_model(kind, layers=LAYERS, width=WIDTH)
    adapter = part_adapter(get_adapter(model.config.model_type))
    inputs, positions = model_inputs(model, tokenizer, kind)

    def record(net):
        recorder = PartRecorder(adapter.blocks(net), adapter.parts)
        return run_states(net, adapter, inputs, positions, 3, 0, recorder=recorder)

    on_cpu = record(model)
    net = on_device(model)
    with module_devices() as seen:
        got = record(net)
    assert seen == {DEVICE.type}
    assert_numpy(got, np.float32)
    assert len(got) == len(part_sites(LAYERS, adapter.parts))
    np.testing.assert_allclose(got, on_cpu, **CLOSE)


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_scores_on_the_gpu_equal_the_cpu(kind):
    """Decoding and scoring with the model on the GPU give the CPU's numbers (a Llama head has
    no bias: its expected bias must be made on the head's device), as numpy arrays; so do the
    top-k tokens."""
    model, tokenizer = make_model(kind, layers=LAYERS, width=WIDTH)
    adapter = get_adapter(model.config.model_type)
    rng = np.random.default_rng(0)
    final = rng.normal(size=(40, WIDTH)).astype(np.float32)
    early = (final + rng.normal(size=final.shape)).astype(np.float32)
    gold = rng.integers(-1, len(tokenizer), size=40)  # -1: no gold token

    def scores(net):
        head = Head.from_model(net, adapter)
        assert head.device.type == parameters_on(net)
        return score(head, final_reference(head, final, 5), early, gold), top_tokens(head, early, 3)

    on_cpu, top_cpu = scores(model)
    with module_devices() as seen:
        on_gpu, (ids, probs) = scores(on_device(model))
    assert seen == {DEVICE.type}
    for values in (*on_gpu.values(), ids, probs):
        assert_numpy(values)
    assert_same_scores(on_gpu, on_cpu)
    np.testing.assert_array_equal(ids, top_cpu[0])
    np.testing.assert_allclose(probs, top_cpu[1], **CLOSE)


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_prefix_and_replaced_runs_on_the_device_equal_the_cpu(kind):
    """The states below each jump layer, and the final states with each variant's parts
    replaced by affine maps after it, are the CPU's when the model is on the device."""
    model, tokenizer = make_model(kind, layers=LAYERS, width=WIDTH)
    adapter = part_adapter(get_adapter(model.config.model_type))
    inputs, positions = model_inputs(model, tokenizer, kind)
    rng = np.random.default_rng(0)
    maps = {
        (block, part): ShortcutMap(near_identity(rng, bias=True))
        for block in range(1, LAYERS + 1)
        for part in PART_NAMES
    }

    def runs(net):
        out = {}
        prefixes = prefix_states(net, adapter, inputs, range(LAYERS + 1), 3, 0)
        for jump in range(LAYERS + 1):
            prefix = prefixes[jump]
            out[jump] = prefix
            for variant, parts in VARIANTS.items():
                chosen = {key: m for key, m in maps.items() if key[1] in parts}
                out[jump, variant] = replaced_final_states(
                    net, adapter, prefix, positions, jump, chosen, 3
                )
        return out

    on_cpu = runs(model)
    net = on_device(model)
    with module_devices() as seen:
        got = runs(net)
    assert seen == {DEVICE.type}
    assert len(adapter.blocks(net)) == LAYERS  # the model is whole again
    for key, want in on_cpu.items():
        if isinstance(key, int):  # a prefix: (len, d) per sentence
            assert [len(p) for p in got[key]] == [len(x) for x in inputs]
            for prefix, prefix_cpu in zip(got[key], want, strict=True):
                assert_numpy(prefix, np.float32)
                np.testing.assert_allclose(prefix, prefix_cpu, **CLOSE, err_msg=str(key))
        else:
            assert_numpy(got[key], np.float32)
            np.testing.assert_allclose(got[key], want, **CLOSE, err_msg=str(key))


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_early_exit_run_on_the_device_equals_the_cpu(kind):
    """Running the model block by block and stopping at the first confident layer gives the
    CPU's exit layer and token, on both paths: an exit at layer 1 (threshold below every
    confidence) and a run to the end (above every one)."""
    model, tokenizer = make_model(kind, layers=LAYERS, width=WIDTH)
    adapter = get_adapter(model.config.model_type)
    inputs, positions = model_inputs(model, tokenizer, kind)
    shortcut = ShortcutMap(near_identity(np.random.default_rng(0), scale=0.3))

    def to_last(layer, state):
        return shortcut(state).astype(np.float32)

    def exits(net):
        head = Head.from_model(net, adapter)
        return [
            run_with_early_exit(net, adapter, head, to_last, inp, int(pos), threshold)
            for threshold in (-1.0, 2.0)
            for inp, pos in zip(inputs, positions, strict=True)
        ]

    on_cpu = exits(model)
    assert {layer for layer, _ in on_cpu} == {1, LAYERS}
    with module_devices() as seen:
        got = exits(on_device(model))
    assert seen == {DEVICE.type}
    assert got == on_cpu


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_lens_on_the_device_equals_the_cpu(kind, tmp_path):
    """The API's Lens with its model on the device reads the CPU's states (numpy) and predicts
    the CPU's top-k tokens with the CPU's probabilities, under id and under mat maps."""
    model, tokenizer = make_model(kind, layers=LAYERS, width=WIDTH)
    info = model_info(kind, model, tokenizer, "test")
    rng = np.random.default_rng(0)
    path = tmp_path / "mat.safetensors"
    maps = {
        source: {t: near_identity(rng, scale=0.3)["weight"] for t in range(source + 1, LAYERS + 1)}
        for source in range(LAYERS)
    }
    save_maps(path, maps, {"method": "mat"})
    description = {
        "model": kind,
        "corpus": "c",
        "method": "mat",
        "num_layers": LAYERS,
        "hidden_size": WIDTH,
        "architecture": info["architecture"],
    }
    shortcuts = [Shortcuts({**description, "method": "id"}), Shortcuts(description, path)]

    def read(net):
        lens = Lens(net, tokenizer, info, shortcuts)
        assert lens.head.device.type == parameters_on(net)
        return lens.hidden_states(TEXT), lens.predictions(TEXT, k=3)

    (ids_cpu, states_cpu), table_cpu = read(model)
    with module_devices() as seen:
        (ids, states), table = read(on_device(model))
    assert seen == {DEVICE.type}
    assert_numpy(ids)
    assert_numpy(states, np.float32)
    np.testing.assert_array_equal(ids, ids_cpu)
    assert states.shape == (LAYERS + 1, len(ids), WIDTH)
    np.testing.assert_allclose(states, states_cpu, **CLOSE)
    assert table.num_rows == 2 * (LAYERS + 1) * len(ids) * 3
    for column in table.column_names:
        got, want = table.column(column).to_numpy(), table_cpu.column(column).to_numpy()
        if column == "probability":
            np.testing.assert_allclose(got, want, **CLOSE)
        else:
            np.testing.assert_array_equal(got, want, err_msg=column)


# --- the workflow's stages, run as jobs on the CPU and on the device -------------------------


def make_project(work, kind):
    """A cached tiny model, N_SENTENCES validation sentences, their states extracted by a CPU
    job, and mat maps (near the identity) from every layer to every later one."""
    source = save_model(kind, work / "src", layers=LAYERS, width=WIDTH)
    cache_model(kind, {"source": str(source)}, work / "m")
    texts = (SENTENCES * (N_SENTENCES // len(SENTENCES) + 1))[:N_SENTENCES]
    sentences = pa.table(
        {
            "sentence_id": np.arange(N_SENTENCES),
            "text": texts,
            "split": ["validation"] * N_SENTENCES,
            "order": np.arange(N_SENTENCES),
        }
    )
    write_table(sentences, work / "sentences.parquet")
    with job_on(CPU):
        extract_hidden(
            str(work / "m"),
            str(work / "sentences.parquet"),
            str(work / "val"),
            model=kind,
            corpus="c",
            split="validation",
            threads=1,
            **SAMPLING,
        )
    rng = np.random.default_rng(0)
    maps = {
        source: {t: near_identity(rng, scale=0.3)["weight"] for t in range(source + 1, LAYERS + 1)}
        for source in range(LAYERS)
    }
    save_maps(work / "mat.safetensors", maps, {"method": "mat"})
    return work


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """project(kind): the tiny project of that model kind (make_project), made once."""
    made = {}

    def get(kind):
        if kind not in made:
            made[kind] = make_project(tmp_path_factory.mktemp(kind), kind)
        return made[kind]

    return get


def mat_file(work):
    return str(work / "mat.safetensors")


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_extraction_and_decoding_jobs_on_the_device_equal_the_cpu(project, kind, tmp_path):
    """extract_hidden and decode_predictions as jobs on the device write the CPU job's states
    and per-position scores (id and mat), hence the same early-exit confidences."""
    work = project(kind)
    for name, device in JOBS:
        out = tmp_path / name
        with job_on(device) as seen:
            extract_hidden(
                str(work / "m"),
                str(work / "sentences.parquet"),
                str(out / "val"),
                model=kind,
                corpus="c",
                split="validation",
                threads=1,
                **SAMPLING,
            )
            decode_predictions(
                str(work / "m"),
                str(out / "val"),
                {"id": None, "mat": mat_file(work)},
                {method: str(out / f"{method}.parquet") for method in ("id", "mat")},
                model=kind,
                top_k=5,
                threads=1,
            )
        assert seen == {device.type}, name
    cpu, dev = tmp_path / "cpu", tmp_path / "device"
    positions, info = read_positions(dev / "val")
    assert positions.equals(read_positions(cpu / "val")[0]) and info["sentences"] == N_SENTENCES
    assert_same_states(
        dev / "val", cpu / "val", [f"layer_{layer:03d}.parquet" for layer in range(LAYERS + 1)]
    )
    for method in ("id", "mat"):
        got, want = read_table(dev / f"{method}.parquet"), read_table(cpu / f"{method}.parquet")
        assert_same_scores(got, want)
        # early exit's confidences (top-1 minus top-2 probability) and hits, layer by layer
        ids, confidence, correct = layer_arrays(got)
        want_ids, want_confidence, want_correct = layer_arrays(want)
        np.testing.assert_array_equal(ids, want_ids)
        assert confidence.shape == (N_SENTENCES, LAYERS + 1)
        np.testing.assert_allclose(confidence, want_confidence, **CLOSE)
        np.testing.assert_array_equal(correct, want_correct)


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_submodule_jobs_on_the_device_equal_the_cpu(project, kind, tmp_path):
    """record_parts and replace_parts as jobs on the device write the CPU job's part states and
    replaced runs' scores, at every jump layer and variant."""
    work = project(kind)
    rng = np.random.default_rng(1)
    part_maps = tmp_path / "parts.safetensors"
    weights = {
        (block, part): near_identity(rng)["weight"]
        for block in range(1, LAYERS + 1)
        for part in PART_NAMES
    }
    save_part_maps(part_maps, weights, {"method": "mat", "model": kind})
    for name, device in JOBS:
        out = tmp_path / name
        out.mkdir()
        with job_on(device) as seen:
            record_parts(
                str(work / "m"),
                str(work / "sentences.parquet"),
                str(out / "parts"),
                model=kind,
                corpus="c",
                split="validation",
                threads=1,
                **SAMPLING,
            )
            replace_parts(
                str(work / "m"),
                str(work / "sentences.parquet"),
                str(work / "val"),
                str(part_maps),
                str(out / "replaced.parquet"),
                model=kind,
                variants={v: list(parts) for v, parts in VARIANTS.items()},
                jumps=list(range(LAYERS + 1)),
                count=N_SENTENCES // 2,
                top_k=5,
                batch_size=5,
                threads=1,
            )
        assert seen == {device.type}, name
    cpu, dev = tmp_path / "cpu", tmp_path / "device"
    adapter = part_adapter(adapter_of(read_json(work / "m" / "info.json")))
    files = [part_file("", *site).name for site in part_sites(LAYERS, adapter.parts)]
    assert_same_states(dev / "parts", cpu / "parts", files)
    replaced = read_table(cpu / "replaced.parquet")
    columns = (replaced.column("method").to_pylist(), replaced.column("layer").to_pylist())
    runs = set(zip(*columns, strict=True))
    assert runs == {(v, jump) for v in VARIANTS for jump in range(LAYERS + 1)}
    assert_same_scores(read_table(dev / "replaced.parquet"), replaced)


def full_loss(work, kind, method, maps: dict[int, ShortcutMap]) -> dict[int, float]:
    """The loss each trained map has on all the states, computed on the CPU: the mean squared
    error to the target layer (NJTC, N-NJTC), or the KL to the final prediction (tuned lens)."""
    ids, x = read_states(work / "val", 0, np.float32)
    losses = {}
    for target, shortcut in maps.items():
        _, y = read_states(work / "val", target, np.float32)
        mapped = shortcut(x)
        if method != "tuned_lens":
            losses[target] = float(np.mean((mapped - y) ** 2))
            continue
        model, _, info = load_cached(work / "m")
        head = Head.from_model(model, get_adapter(info["architecture"]))
        reference = final_reference(head, y, 1)
        with torch.no_grad():
            states = torch.tensor(mapped, dtype=torch.float32)
            losses[target] = float(lens_loss(head, reference, states, torch.arange(len(ids))))
    return losses


@pytest.mark.parametrize(
    ("kind", "method"),
    [
        ("gpt2", "njtc"),
        ("gpt2", "nnjtc"),
        ("llama", "tuned_lens"),
        ("gpt2", "tuned_lens"),
        ("bert-mlm", "tuned_lens"),
    ],
)
def test_training_jobs_on_the_device(project, kind, method, tmp_path):
    """train_map (the tuned lens, NJTC, N-NJTC: a job each) as jobs on the device train there
    (the map module, the states and, for the tuned lens, the model's head) and give finite maps
    of the CPU job's shapes whose loss is no worse than a loose bound over the CPU job's."""
    work = project(kind)
    changes = {"learning_rate": 0.01, "max_epochs": 8, "batch_size": 8, "patience": 8}
    if method != "tuned_lens":
        changes.update(rank=None, targets="all")
    settings = dataclasses.asdict(METHODS[method].settings.defaults(method, **changes))
    trained = {}
    for name, device in JOBS:
        out = tmp_path / f"{name}.safetensors"
        with job_on(device) as seen:
            train_map(
                str(work / "val"),
                str(out),
                # the head for the tuned lens; NJTC and N-NJTC read the states alone
                model_dir=str(work / "m") if method == "tuned_lens" else None,
                method=method,
                settings=settings,
                seed=0,
                model=kind,
                corpus="c",
                threads=1,
            )
        assert seen == {device.type}, name
        trained[name] = load_maps(out, 0), read_metadata(out)["training"]
    (maps, summary), (maps_cpu, summary_cpu) = trained["device"], trained["cpu"]
    assert set(maps) == set(maps_cpu) == ({LAYERS} if method == "tuned_lens" else {1, 2})
    for target, shortcut in maps.items():
        want = maps_cpu[target].tensors
        assert set(shortcut.tensors) == set(want)
        for part, tensor in shortcut.tensors.items():
            assert_numpy(tensor, np.float32)
            assert tensor.shape == want[part].shape, part
            assert np.isfinite(tensor).all(), part
    for target, loss in full_loss(work, kind, method, maps).items():
        cpu_loss = full_loss(work, kind, method, {target: maps_cpu[target]})[target]
        assert np.isfinite(loss) and loss <= 1.1 * cpu_loss + 1e-4, (target, loss, cpu_loss)
        held_out = summary[f"0->{target}"]["best_holdout_loss"]
        held_out_cpu = summary_cpu[f"0->{target}"]["best_holdout_loss"]
        assert held_out <= 1.1 * held_out_cpu + 1e-4, (target, held_out, held_out_cpu)
        assert summary[f"0->{target}"]["epochs"] >= 1


# --- depth pruning -----------------------------------------------------------------------------


def test_depth_pruning_sums_and_runs_equal_the_cpus():
    """The calibration sums (float64 on the device) and the evaluation runs of every variant,
    on DEVICE and on the CPU: the same sums, maps and per-sentence scores."""
    from jtc.pruning.calibrate import fit_span
    from jtc.pruning.runs import SpanRun, span_scores
    from jtc.pruning.spans import StatisticsPlan
    from jtc.pruning.sums import span_statistics

    model, tokenizer = make_model("llama", layers=4, width=WIDTH)
    adapter = get_adapter("llama")
    inputs = [np.asarray(tokenizer(s)["input_ids"]) for s in SENTENCES]
    variants = ("drop", "mat", "replaceme", "low_rank", "rotation_replaceme")
    plan = StatisticsPlan.of(4, [2], list(variants))
    runs = [SpanRun.span(v, 1, 2) for v in variants]
    runs.append(SpanRun("drop", -1, 2, (1, 3)))
    results = {}
    for name, net in (("cpu", model), ("device", on_device(model))):
        with module_devices() as seen:
            grams = span_statistics(net, adapter, inputs, plan, 3, 0)
            fits = {v: fit_span(grams, v, 1, 2, 2) for v in variants}

            def span_map(run, fits=fits):
                tensors = dict(fits[run.variant].tensors) if run.start >= 0 else {}
                rotation = tensors.pop("rotation", None)  # rotation_replaceme's second part
                return (ShortcutMap(tensors) if tensors else None), rotation

            head = Head.from_model(net, adapter)
            table = span_scores(
                net, adapter, head, inputs, np.arange(len(inputs)), runs, span_map, 3, 0
            )
        assert seen == {DEVICE.type} if name == "device" else seen == {"cpu"}
        results[name] = (grams, fits, table)
    (grams, fits, table), (grams_d, fits_d, table_d) = results["cpu"], results["device"]
    np.testing.assert_allclose(grams_d.squares, grams.squares, rtol=1e-4)
    np.testing.assert_allclose(grams_d.ffn_grams[1], grams.ffn_grams[1], rtol=1e-4, atol=1e-6)
    for variant, fit in fits.items():
        for part, value in fit.tensors.items():
            np.testing.assert_allclose(fits_d[variant].tensors[part], value, rtol=1e-3, atol=1e-4)
    for column in ("cross_entropy", "cross_entropy_full", "kl"):
        np.testing.assert_allclose(table_d[column].to_numpy(), table[column].to_numpy(), **CLOSE)
    assert table_d["tokens"].to_pylist() == table["tokens"].to_pylist()
