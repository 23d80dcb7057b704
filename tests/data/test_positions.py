"""Fits on several token positions per training sentence (config positions_per_sentence): a
row per (sentence, position) in the states files; the fits read every layer through
LayerStates, which holds a bounded amount; the trained methods hold out whole sentences for
early stopping; the map files count sentences and rows apart."""

import dataclasses

import numpy as np
import pytest
import torch
from fits import fit_map
from safetensors.numpy import load_file

from jtc.data.states import LayerStates, StateWriter, layer_file
from jtc.files.io import write_json
from jtc.settings import LowRankSettings
from jtc.shortcuts.maps import read_metadata
from jtc.shortcuts.train import held_out_rows

LAYERS = 3
SETTINGS = {
    "mat": {},
    "nnjtc": dataclasses.asdict(
        LowRankSettings.defaults("nnjtc", targets="last", max_epochs=2, batch_size=16)
    ),
}


def states_dir(folder, sentences, per_sentence, width=6):
    """Random states of layers 0..LAYERS, `per_sentence` rows (positions) per sentence."""
    rng = np.random.default_rng(0)
    ids = np.repeat(np.arange(sentences) * 5 + 2, per_sentence)
    positions = np.tile(np.arange(per_sentence, dtype=np.int32), sentences)
    folder.mkdir(parents=True)
    h = rng.normal(size=(len(ids), width))
    for layer in range(LAYERS + 1):
        writer = StateWriter(layer_file(folder, layer), width, "float32", 1000)
        writer.write(ids, positions, h.astype(np.float32))
        writer.close()
        h = np.tanh(h @ rng.normal(size=(width, width))) + 0.1 * rng.normal(size=h.shape)
    info = {"num_layers": LAYERS, "hidden_size": width, "sentences": sentences, "rows": len(ids)}
    write_json(folder / "info.json", info)
    return folder, ids


def test_held_out_share_keeps_each_sentence_on_one_side():
    """With several rows per sentence the held-out share is drawn over sentences; with one row
    per sentence it is the plain row draw (the same rows as without groups)."""
    groups = np.repeat(np.arange(40) * 3 + 1, 5)  # 40 sentences, 5 rows each
    hold, train = held_out_rows(len(groups), 0.2, torch.Generator().manual_seed(0), groups)
    assert len(hold) == 8 * 5 and len(hold) + len(train) == len(groups)
    assert not set(groups[hold.numpy()]) & set(groups[train.numpy()])
    plain = held_out_rows(40, 0.2, torch.Generator().manual_seed(0))
    single = held_out_rows(40, 0.2, torch.Generator().manual_seed(0), np.arange(40) * 3)
    assert all(torch.equal(a, b) for a, b in zip(plain, single, strict=True))


def test_layer_states_read_beyond_their_bound_give_the_same_layers(tmp_path):
    folder, ids = states_dir(tmp_path / "train", 10, 4)
    kept = LayerStates(folder)
    bounded = LayerStates(folder, keep_bytes=2 * len(ids) * 6 * 4)  # two layers kept at most
    assert len(kept) == LAYERS + 1 and np.array_equal(kept.sentence_ids, ids)
    for layer in [3, 1, 3, 2, 0, -1]:
        assert np.array_equal(kept[layer], bounded[layer])
    assert len(bounded.kept) == 2 and len(kept.kept) == LAYERS + 1
    assert [a.shape for a in bounded[1:3]] == [(len(ids), 6)] * 2
    with pytest.raises(IndexError):
        bounded[LAYERS + 1]


def test_fits_on_several_positions_count_sentences_and_rows(tmp_path, monkeypatch):
    """fit_map on 4 rows per sentence: the map files record 30 sentences and 120 rows; the
    maps do not depend on how many layers the job keeps in memory."""
    import jtc.data.states as states

    folder, _ = states_dir(tmp_path / "train", 30, 4)
    files, reads = {}, []
    read_aligned = states.read_aligned
    monkeypatch.setattr(
        states, "read_aligned", lambda *a, **k: reads.append(a[1]) or read_aligned(*a, **k)
    )
    for name, keep in (("all", states.KEEP_BYTES), ("one", 120 * 6 * 4)):
        monkeypatch.setattr(states, "KEEP_BYTES", keep)
        reads.clear()
        files[name] = {m: str(tmp_path / name / f"{m}.safetensors") for m in SETTINGS}
        fit_map(str(folder), files[name], settings=SETTINGS, seed=0, model="m", corpus="c",
                threads=1)  # fmt: skip
        # every layer read once when all are kept; read again at each use when only one is
        assert sorted(reads) == [1, 2, 3] if name == "all" else len(reads) > LAYERS
    for method in SETTINGS:
        meta = read_metadata(files["all"][method])
        assert meta["n_train"] == 30 and meta["training_rows"] == 120
        a, b = load_file(files["all"][method]), load_file(files["one"][method])
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_row_groups_stay_bounded_when_one_write_is_larger(tmp_path):
    """A write of more rows than a row group holds (many positions at a real width) is split:
    no row group is larger than the writer's bound, and the rows read back whole."""
    import pyarrow.parquet as pq

    from jtc.data.states import read_states

    states = np.random.default_rng(0).normal(size=(250, 8)).astype(np.float32)
    writer = StateWriter(layer_file(tmp_path, 0), 8, "float32", 100)
    writer.write(np.arange(250), np.zeros(250, dtype=np.int32), states)
    writer.close()
    meta = pq.ParquetFile(layer_file(tmp_path, 0)).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [100, 100, 50]
    assert np.array_equal(read_states(tmp_path, 0)[1], states)
