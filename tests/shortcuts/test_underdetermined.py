"""Fits on fewer training rows than the width they map from: recorded in the map files, warned in
the job's log, marked in the parameter and part r² tables and stated on the report's landing page;
fits on enough rows are not."""

import dataclasses
import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from docutils.core import publish_parts
from fits import fit_map
from jinja2 import Environment
from tables import parameters, r2_table

from jtc.data.states import StateWriter, layer_file, part_file
from jtc.files.io import write_json
from jtc.report.headline import Tables, headline_rows, headline_table, landing_section
from jtc.settings import LowRankSettings, TrainSettings
from jtc.shortcuts.maps import read_metadata
from jtc.shortcuts.underdetermined import TRAINING_ROWS, underdetermined
from jtc.stages.metrics import parameter_table
from jtc.stages.submodules import fit_parts, part_r2_table

LAYERS = 2  # states of layers 0..2
SETTINGS = {
    "mat": {},
    "rrr": {"rank": 2, "targets": "all"},
    "njtc": dataclasses.asdict(
        LowRankSettings.defaults("njtc", rank=2, targets="last", max_epochs=1, batch_size=8)
    ),
}


def write_site(path, states):
    writer = StateWriter(path, states.shape[1], "float32", 1000)
    writer.write(np.arange(len(states)), np.zeros(len(states), dtype=np.int32), states)
    writer.close()


def states_dir(folder, n, width):
    """Random states of layers 0..LAYERS: n rows of `width`, each layer a linear map of the last
    plus noise."""
    rng = np.random.default_rng(n * 1000 + width)
    folder.mkdir(parents=True)
    h = rng.normal(size=(n, width))
    for layer in range(LAYERS + 1):
        write_site(layer_file(folder, layer), h.astype(np.float32))
        h = h @ rng.normal(size=(width, width)) / np.sqrt(width) + 0.1 * rng.normal(size=h.shape)
    write_json(folder / "info.json", {"num_layers": LAYERS, "hidden_size": width, "sentences": n})
    return folder


def fitted(tmp_path, n, width):
    """The map files of every method in SETTINGS fitted on n rows of `width`, and the stage's
    parameter table of them."""
    train = states_dir(tmp_path / "train", n, width)
    maps = {m: str(tmp_path / "maps" / f"{m}.safetensors") for m in SETTINGS}
    fit_map(str(train), maps, settings=SETTINGS, seed=0, model="m", corpus="c", threads=1)
    out = tmp_path / "parameters.parquet"
    parameter_table(str(train), maps, str(out), model="m", corpus="c")
    return maps, {r["method"]: r for r in pq.read_table(out).to_pylist()}


def warnings_of(caplog):
    return [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "jtc"]


def test_fewer_rows_than_the_width_are_recorded_warned_and_flagged(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    maps, table = fitted(tmp_path, n=20, width=32)
    for method, path in maps.items():
        assert read_metadata(path)[TRAINING_ROWS] == 20, method
    # the fit job's log and the parameter table job's: one warning each per method, naming it
    warned = [r.getMessage() for r in warnings_of(caplog)]
    for method in SETTINGS:
        mine = [w for w in warned if w.startswith(f"m on c, {method}: ")]
        assert len(mine) == 2, (method, warned)
        assert "fitted on 20 training rows, fewer than the width 32" in mine[0]
        assert "overfitting" in mine[0] and "sizes.train" in mine[0]
    # the parameter table: the rows and the flag, for the low-rank methods too; id fits nothing
    for method in SETTINGS:
        assert table[method]["training_rows"] == 20 and table[method]["underdetermined"] is True
    assert table["id"]["training_rows"] is None and table["id"]["underdetermined"] is False
    assert table["mat"]["parameters"] == 32 * 32  # the columns of maps.parameter_table stay


def test_as_many_rows_as_the_width_are_not_flagged(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    maps, table = fitted(tmp_path, n=64, width=16)
    assert warnings_of(caplog) == []
    for method in SETTINGS:
        assert table[method]["training_rows"] == 64 and table[method]["underdetermined"] is False
    assert underdetermined(16, 16) is False and underdetermined(15, 16) is True
    assert underdetermined(None, 16) is None


def test_a_map_file_that_records_no_rows_is_left_unflagged(tmp_path):
    """Files written before `training_rows` have `n_train`; with neither the flag is null."""
    from jtc.shortcuts.maps import save_maps

    maps = {}
    for method, meta in {"mat": {"n_train": 3}, "rrr": {}}.items():
        maps[method] = str(tmp_path / f"{method}.safetensors")
        save_maps(maps[method], {0: {1: np.eye(4)}}, {"method": method, **meta})
    write_json(tmp_path / "info.json", {"num_layers": 1, "hidden_size": 4})
    out = tmp_path / "parameters.parquet"
    parameter_table(str(tmp_path), maps, str(out), model="m", corpus="c")
    rows = {r["method"]: r for r in pq.read_table(out).to_pylist()}
    assert (rows["mat"]["training_rows"], rows["mat"]["underdetermined"]) == (3, True)
    assert (rows["rrr"]["training_rows"], rows["rrr"]["underdetermined"]) == (None, None)


def parts_dir(folder, n, width, blocks=2):
    rng = np.random.default_rng(n + width)
    folder.mkdir(parents=True)
    for block in range(1, blocks + 1):
        for part in ("attn", "ffn"):
            x = rng.normal(size=(n, width)).astype(np.float32)
            y = (x @ rng.normal(size=(width, width)) + 0.1 * rng.normal(size=(n, width))).astype(
                np.float32
            )
            write_site(part_file(folder, block, part, "in"), x)
            write_site(part_file(folder, block, part, "out"), y)
    parts = {"attn": ["h.attn.in", "h.attn"], "ffn": ["h.mlp.in", "h.mlp"]}
    write_json(
        folder / "info.json",
        {"num_layers": blocks, "hidden_size": width, "sentences": n, "parts": parts},
    )
    return folder


@pytest.mark.parametrize(("n", "flagged"), [(12, True), (40, False)])
def test_part_maps_are_flagged_in_the_part_r2_table(tmp_path, caplog, n, flagged):
    caplog.set_level(logging.INFO)
    width = 24
    train = parts_dir(tmp_path / "train", n, width)
    validation = parts_dir(tmp_path / "validation", 30, width)
    maps = tmp_path / "parts.safetensors"
    fit_parts(str(train), str(maps), model="m", corpus="c", threads=1)
    out = tmp_path / "parts_r2.parquet"
    part_r2_table(str(validation), str(maps), str(out), model="m", corpus="c")
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 4 and {r["training_rows"] for r in rows} == {n}
    assert {r["underdetermined"] for r in rows} == {flagged}
    warned = [r.getMessage() for r in warnings_of(caplog)]
    if flagged:  # fit_parts' log and part_r2_table's: one line each for every part
        assert len(warned) == 2, warned
        assert all(
            w.startswith(
                "m on c, sub-module part maps (attn, ffn): fitted on 12 training rows, "
                "fewer than the width 24"
            )
            for w in warned
        )
    else:
        assert warned == []


def with_rows(table, rows, width):
    """A parameter table as the stage writes it: fitted on `rows` of `width`."""
    methods = table.column("method").to_pylist()
    table = table.set_column(
        table.schema.get_field_index("hidden_size"), "hidden_size", pa.array([width] * len(methods))
    )
    counts = [None if m == "id" else rows for m in methods]
    flags = [False if m == "id" else rows < width for m in methods]
    table = table.append_column("training_rows", pa.array(counts, pa.int64()))
    return table.append_column("underdetermined", pa.array(flags, pa.bool_()))


def rendered(section):
    return publish_parts(Environment().from_string(section).render(), writer="html")["html_body"]


def test_the_landing_page_names_the_underdetermined_maps_only_when_there_are_some():
    methods = ["id", "mat", "njtc"]
    few = Tables(r2_table(methods), with_rows(parameters(methods), 20, 128))
    enough = Tables(r2_table(methods), with_rows(parameters(methods), 2000, 576))
    rows = headline_rows("tiny", "news", few) + headline_rows("big", "news", enough)
    table = headline_table(rows)
    by = {(r["model"], r["method"]): r for r in table.to_pylist()}
    assert by[("tiny", "mat")]["underdetermined"] and by[("tiny", "mat")]["training_rows"] == 20
    assert not by[("big", "mat")]["underdetermined"] and not by[("tiny", "id")]["underdetermined"]
    html = rendered(landing_section(table))
    assert "System Message" not in html  # valid reStructuredText
    assert "fewer training rows than the width:</strong> tiny on news (mat, njtc)." in html
    assert "big on news" in html and "big on news (" not in html
    assert html.count("Underdetermined fits.") == 1
    assert "<strong>mat</strong>, <strong>njtc</strong> on 20 training rows for a width of 128" in (
        html
    )
    assert "dominated by overfitting" in html
    # nothing said where every map had enough rows, nor for tables from before the columns
    alone = landing_section(headline_table(headline_rows("big", "news", enough)))
    assert "nderdetermined" not in alone and "overfitting" not in alone
    old = Tables(r2_table(methods), parameters(methods))
    assert "overfitting" not in landing_section(headline_table(headline_rows("m", "c", old)))


def test_the_end_of_run_message_names_the_underdetermined_maps(tmp_path):
    from jtc.pipeline.summary import problems

    metrics = tmp_path / "results/metrics"
    for model, rows in (("tiny", 20), ("big", 2000)):
        (metrics / model / "news").mkdir(parents=True)
        table = with_rows(parameters(["id", "mat", "njtc"]), rows, 128)
        pq.write_table(table, metrics / model / "news/parameters.parquet")
    parts = [
        {"block": 1, "part": p, "training_rows": 20, "underdetermined": True}
        for p in ("attn", "ffn")
    ]
    pq.write_table(pa.Table.from_pylist(parts), metrics / "tiny/news/parts_r2.parquet")
    assert problems(tmp_path / "results", ["tiny", "big"], ["news"]) == [
        "tiny/news: mat, njtc fitted on 20 training rows, fewer than the width 128: "
        "underdetermined, their r² is dominated by overfitting (parameters.csv, underdetermined; "
        "raise sizes.train)",
        "tiny/news: the sub-module part maps (attn, ffn) fitted on 20 training rows, fewer than "
        "their input width: their r² is dominated by overfitting (parts_r2.csv, underdetermined)",
    ]


def test_the_tuned_lens_job_records_and_warns_too(tmp_path, caplog):
    """train_map (the tuned lens, trained through the head) on 12 sentences of a width-32 model."""
    from tiny import SENTENCES, save_model

    from jtc.files.io import write_table
    from jtc.model.cache import cache_model
    from jtc.stages.fit import train_map
    from jtc.stages.hidden import extract_hidden

    n = 12
    cache_model(
        "gpt2",
        {"source": str(save_model("gpt2", tmp_path / "src", layers=2, width=32))},
        tmp_path / "m",
    )
    texts = (SENTENCES * 2)[:n]
    sentences = {"sentence_id": np.arange(n), "text": texts, "split": ["train"] * n}
    write_table(pa.table({**sentences, "order": np.arange(n)}), tmp_path / "sentences.parquet")
    sampling = dict(n=n, seed=0, batch_size=4, max_tokens=16, dtype="float32")
    extract_hidden(
        str(tmp_path / "m"),
        str(tmp_path / "sentences.parquet"),
        str(tmp_path / "train"),
        model="gpt2",
        corpus="c",
        split="train",
        threads=1,
        **sampling,
    )
    caplog.set_level(logging.INFO)
    out = tmp_path / "tuned_lens.safetensors"
    settings = dataclasses.asdict(TrainSettings.defaults("tuned_lens", max_epochs=1, batch_size=4))
    train_map(
        str(tmp_path / "train"),
        str(out),
        model_dir=str(tmp_path / "m"),
        method="tuned_lens",
        settings=settings,
        seed=0,
        model="gpt2",
        corpus="c",
        threads=1,
    )
    assert read_metadata(out)[TRAINING_ROWS] == n
    warned = [r.getMessage() for r in warnings_of(caplog)]
    assert any(
        w.startswith(f"gpt2 on c, tuned_lens: fitted on {n} training rows, fewer than the width 32")
        for w in warned
    ), warned


def test_a_map_trained_on_the_pooled_layers_counts_every_layers_rows(tmp_path, caplog):
    """one_jump is trained on the pairs (h_l, h_L) of every layer l < L: 2 × 20 rows, above the
    width 32, where every per-layer map (one_jump_selected's too) has 20."""
    caplog.set_level(logging.INFO)
    train = states_dir(tmp_path / "train", 20, 32)
    settings = {
        m: dataclasses.asdict(LowRankSettings.defaults(m, rank=2, max_epochs=1, batch_size=8))
        for m in ("one_jump", "one_jump_selected")
    }
    maps = {m: str(tmp_path / f"{m}.safetensors") for m in settings}
    fit_map(str(train), maps, settings=settings, seed=0, model="m", corpus="c", threads=1)
    out = tmp_path / "parameters.parquet"
    parameter_table(str(train), maps, str(out), model="m", corpus="c")
    rows = {r["method"]: r for r in pq.read_table(out).to_pylist()}
    assert (rows["one_jump"]["training_rows"], rows["one_jump"]["underdetermined"]) == (40, False)
    selected = rows["one_jump_selected"]
    assert (selected["training_rows"], selected["underdetermined"]) == (20, True)
    assert {r.getMessage().split(":")[0] for r in warnings_of(caplog)} == {
        "m on c, one_jump_selected"
    }


def repeated_rows_dir(folder, distinct, repeats, width):
    """States whose layer 0 holds `distinct` rows, each `repeats` times (a token embedding read
    once per occurrence), and whose later layers are full-rank functions of the row."""
    rng = np.random.default_rng(distinct * 100 + width)
    folder.mkdir(parents=True)
    base = np.repeat(rng.normal(size=(distinct, width)), repeats, axis=0)
    n = len(base)
    h = base
    for layer in range(LAYERS + 1):
        write_site(layer_file(folder, layer), h.astype(np.float32))
        h = np.tanh(h @ rng.normal(size=(width, width)) / np.sqrt(width)) + rng.normal(
            size=(n, width)
        )
    write_json(folder / "info.json", {"num_layers": LAYERS, "hidden_size": width, "sentences": n})
    return folder


def test_a_rank_below_the_width_is_flagged_even_with_more_rows_than_the_width(tmp_path, caplog):
    """Layer 0 of 96 rows holds 12 distinct rows at width 16: 6 rows a coefficient, rank 12.
    The row flag stays off; the rank flag and the warning name the layer, rank and width."""
    caplog.set_level(logging.INFO)
    train = repeated_rows_dir(tmp_path / "train", distinct=12, repeats=8, width=16)
    settings = {"mat": {}, "rrr": {"rank": 2, "targets": "all"}}
    maps = {m: str(tmp_path / "maps" / f"{m}.safetensors") for m in settings}
    fit_map(str(train), maps, settings=settings, seed=0, model="m", corpus="c", threads=1)
    for method in settings:  # layer 0 spans 12 dimensions; the later layers (noise added) 16
        assert read_metadata(maps[method])["gram_ranks"] == {"0": 12, "1": 16}, method
    out = tmp_path / "parameters.parquet"
    parameter_table(str(train), maps, str(out), model="m", corpus="c")
    table = {r["method"]: r for r in pq.read_table(out).to_pylist()}
    for method in settings:
        row = table[method]
        assert (row["training_rows"], row["underdetermined"]) == (96, False)
        assert row["rows_per_coefficient"] == pytest.approx(6.0)
        assert (row["gram_rank"], row["rank_deficient"]) == (12, True)
    assert (table["id"]["gram_rank"], table["id"]["rank_deficient"]) == (None, False)
    warned = [r.getMessage() for r in warnings_of(caplog)]
    for method in settings:  # the fit job's log and the table job's
        mine = [w for w in warned if w.startswith(f"m on c, {method}: ")]
        assert len(mine) == 2, (method, warned)
        assert "layer 0 (rank 12)" in mine[0] and "width 16" in mine[0]
        assert "96 of them" in mine[0] and "sizes.train" in mine[0]


def test_full_rank_rows_report_their_rank_and_rows_per_coefficient(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    maps, table = fitted(tmp_path, n=64, width=16)
    assert read_metadata(maps["mat"])["gram_ranks"] == {"0": 16, "1": 16}
    for method in ("mat", "rrr"):
        assert table[method]["gram_rank"] == 16 and table[method]["rank_deficient"] is False
        assert table[method]["rows_per_coefficient"] == pytest.approx(4.0)
    # the trained methods form no Gram matrix of their own: rank unknown, rows still reported
    assert table["njtc"]["gram_rank"] is None and table["njtc"]["rank_deficient"] is None
    assert table["njtc"]["rows_per_coefficient"] == pytest.approx(4.0)
    assert warnings_of(caplog) == []


def test_part_maps_report_the_rank_of_their_inputs(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    width = 24
    train = parts_dir(tmp_path / "train", 60, width)
    # block 2's attention input: 6 distinct rows, each 10 times
    x = np.repeat(np.random.default_rng(1).normal(size=(6, width)), 10, axis=0)
    write_site(part_file(train, 2, "attn", "in"), x.astype(np.float32))
    validation = parts_dir(tmp_path / "validation", 30, width)
    maps = tmp_path / "parts.safetensors"
    fit_parts(str(train), str(maps), model="m", corpus="c", threads=1)
    out = tmp_path / "parts_r2.parquet"
    part_r2_table(str(validation), str(maps), str(out), model="m", corpus="c")
    rows = {(r["block"], r["part"]): r for r in pq.read_table(out).to_pylist()}
    assert rows[(2, "attn")]["gram_rank"] == 6 and rows[(2, "attn")]["rank_deficient"] is True
    assert rows[(1, "attn")]["gram_rank"] == width and not rows[(1, "attn")]["rank_deficient"]
    assert {r["rows_per_coefficient"] for r in rows.values()} == {2.5}
    assert not any(r["underdetermined"] for r in rows.values())
    warned = [r.getMessage() for r in warnings_of(caplog)]
    assert len(warned) == 2 and all("block 2 attn (rank 6)" in w for w in warned), warned
