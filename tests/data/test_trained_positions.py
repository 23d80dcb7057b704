"""A trained method's share of the stored training rows (training.<method>.positions): drawn per
sentence, seeded and deterministic, the same rows extraction would store for that count, and
the only rows that method is trained on."""

import dataclasses

import numpy as np
import pytest
from fits import fit_map

from jtc.data.positions import RowSubset, draw_positions, subsample_rows, training_rows_for
from jtc.data.states import LayerStates, StateWriter, layer_file
from jtc.files.io import write_json
from jtc.settings import LowRankSettings
from jtc.shortcuts.maps import read_metadata
from jtc.shortcuts.underdetermined import TRAINING_ROWS


def stored(lengths):
    """Every position of sentences 10, 11, ... of the given lengths, a sentence's rows together."""
    ids = np.concatenate([np.full(n, 10 + i) for i, n in enumerate(lengths)])
    positions = np.concatenate([np.arange(n) for n in lengths])
    return ids, positions


def test_k_rows_of_each_sentence_drawn_as_extraction_draws_k_positions():
    ids, positions = stored([7, 2, 12, 5])
    rows = subsample_rows(ids, positions, 3, seed=4)
    assert np.array_equal(rows, subsample_rows(ids, positions, 3, seed=4))  # deterministic
    assert np.all(np.diff(rows) > 0)
    sentences, numbers = np.unique(ids[rows], return_counts=True)
    counts = dict(zip(sentences.tolist(), numbers.tolist(), strict=True))
    assert counts == {10: 3, 11: 2, 12: 3, 13: 3}  # a 2-token sentence gives both
    for sentence, n in ((10, 7), (12, 12), (13, 5)):  # extraction's draw for the same k
        mine = positions[rows][ids[rows] == sentence]
        assert np.array_equal(mine, draw_positions(4, sentence, np.arange(n), 3))
    assert not np.array_equal(rows, subsample_rows(ids, positions, 3, seed=5))
    assert subsample_rows(ids, positions, "all", seed=4) is None
    one = subsample_rows(ids, positions, 1, seed=4)
    assert len(one) == 4 and set(ids[one]) == {10, 11, 12, 13}


def test_a_sentence_keeps_its_rows_whatever_else_is_stored():
    ids, positions = stored([9, 6])
    alone = subsample_rows(ids[:9], positions[:9], 4, seed=0)
    together = subsample_rows(ids, positions, 4, seed=0)
    assert np.array_equal(positions[together][ids[together] == 10], positions[alone])
    # stored rows out of sentence order are grouped by sentence, not by run
    order = np.r_[np.arange(9, 15), np.arange(9)]
    shuffled = subsample_rows(ids[order], positions[order], 4, seed=0)
    assert sorted(map(tuple, np.c_[ids[order][shuffled], positions[order][shuffled]])) == sorted(
        map(tuple, np.c_[ids[together], positions[together]])
    )


@pytest.mark.parametrize("count", [0, -1, "some", True])
def test_a_count_below_one_is_refused(count):
    ids, positions = stored([3])
    with pytest.raises(ValueError, match="positions"):
        subsample_rows(ids, positions, count, seed=0)


def states_folder(folder, lengths, width=6, layers=2):
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    ids, positions = stored(lengths)
    h = rng.normal(size=(len(ids), width))
    for layer in range(layers + 1):
        writer = StateWriter(layer_file(folder, layer), width, "float32", 1000)
        writer.write(ids, positions.astype(np.int32), h)
        writer.close()
        h = h @ rng.normal(size=(width, width)) + 0.1 * rng.normal(size=h.shape)
    info = {"num_layers": layers, "hidden_size": width, "sentences": len(lengths)}
    write_json(folder / "info.json", info)
    return folder


def test_the_subset_reads_the_chosen_rows_of_every_layer(tmp_path):
    states = LayerStates(states_folder(tmp_path / "train", [8, 8, 8]))
    assert training_rows_for(states, "all", 0) is states
    subset = training_rows_for(states, 2, 0)
    assert isinstance(subset, RowSubset) and len(subset) == 3
    rows = subsample_rows(states.sentence_ids, np.tile(np.arange(8), 3), 2, 0)
    for layer in range(3):
        assert np.array_equal(subset[layer], states[layer][rows])
    assert np.array_equal(subset.sentence_ids, states.sentence_ids[rows])
    assert subset[-1] is subset[2] and len(subset[0:2]) == 2


def test_a_trained_method_alone_reads_its_positions(tmp_path):
    """mat reads every stored row; njtc the 2 of each sentence its positions draws."""
    train = states_folder(tmp_path / "train", [10] * 12)
    njtc = LowRankSettings.defaults(
        "njtc", rank=2, targets="last", max_epochs=1, batch_size=8, positions=2
    )
    settings = {"mat": {}, "njtc": dataclasses.asdict(njtc)}
    maps = {m: str(tmp_path / f"{m}.safetensors") for m in settings}
    fit_map(str(train), maps, settings=settings, seed=0, model="m", corpus="c", threads=1)
    assert read_metadata(maps["mat"])[TRAINING_ROWS] == 120
    meta = read_metadata(maps["njtc"])
    assert meta[TRAINING_ROWS] == 24 and meta["n_train"] == 12
    assert meta["settings"]["positions"] == 2


def test_a_trained_methods_own_job_fits_the_maps_of_the_shared_one(tmp_path):
    """train_map (one trained method a job) gives each trained method the maps, bit for bit,
    that fit_map gives it fitted beside mat and the other methods from the same states (the
    layout before each trained method had its own job): the same rows, the same seeds."""
    from safetensors.numpy import load_file

    from jtc.stages.fit import train_map

    train = states_folder(tmp_path / "train", [10] * 12)
    trained = {
        "njtc": LowRankSettings.defaults("njtc", rank=2, max_epochs=2, batch_size=8, positions=2),
        "nnjtc": LowRankSettings.defaults("nnjtc", rank=2, max_epochs=2, batch_size=8),
        "one_jump_selected": LowRankSettings.defaults(
            "one_jump_selected", rank=2, max_epochs=2, batch_size=8, positions=3
        ),
    }
    settings = {"mat": {}, **{m: dataclasses.asdict(s) for m, s in trained.items()}}
    shared = {m: str(tmp_path / f"shared_{m}.safetensors") for m in settings}
    fit_map(str(train), shared, settings=settings, seed=3, model="m", corpus="c", threads=1)
    for method in trained:
        own = str(tmp_path / f"own_{method}.safetensors")
        train_map(
            str(train),
            own,
            model_dir=None,
            method=method,
            settings=settings[method],
            seed=3,
            model="m",
            corpus="c",
            threads=1,
        )
        first, again = load_file(shared[method]), load_file(own)
        assert sorted(first) == sorted(again), method
        assert all(np.array_equal(first[k], again[k]) for k in first), method
        assert read_metadata(own) == read_metadata(shared[method]), method
