"""Prediction metrics: the decode stage on a cached tiny model, the summary and its bootstrap."""

import numpy as np
import pyarrow as pa
import pytest
from decoding import LAYERS, decode
from tiny import SENTENCES, save_model

from jtc.evaluation.prediction import (
    beside_layer_shortcuts,
    bootstrap_means,
    metric_values,
    prediction_summary,
)
from jtc.files.io import read_table
from jtc.model.cache import cache_model, load_cached
from jtc.report.examples import example_layers, examples_markdown, load_tokenizer
from jtc.settings import IntervalSettings
from jtc.stages.prediction import decode_predictions, prediction_examples


def test_one_job_decodes_every_method_as_jobs_of_one_method_each(validation):
    """The decode job of several methods writes, per method, what it writes for it alone."""
    _, work, identity, noisy = validation
    maps = {"id": None, "mat": identity, "noisy": noisy}
    outs = {m: str(work / f"together_{m}.parquet") for m in maps}
    decode_predictions(
        str(work / "m"), str(work / "val"), maps, outs, model="tiny", top_k=10, threads=1
    )
    for method, path in maps.items():
        together, alone = read_table(outs[method]), decode(work, method, path, f"alone_{method}")
        assert together.schema == alone.schema and together.num_rows == alone.num_rows
        for name in together.column_names:  # bit for bit, NaN (no gold token) included
            np.testing.assert_array_equal(together[name].to_numpy(), alone[name].to_numpy())


def test_identity_map_gives_exactly_ids_numbers(validation):
    _, work, identity, _ = validation
    by_id = decode(work, "id", None, "id")
    by_map = decode(work, "mat", identity, "mat_identity")
    assert by_id.num_rows == len(SENTENCES) * 3 * (LAYERS + 1)
    for column in by_id.column_names[1:]:  # NaN cross-entropy counts as equal here
        np.testing.assert_array_equal(by_map[column].to_numpy(), by_id[column].to_numpy())


def test_last_layer_is_exact_and_precision_grows_with_k(validation):
    _, work, _, noisy = validation
    table = decode(work, "mat", noisy, "mat_noisy")
    layer = table.column("layer").to_numpy()
    rank = table.column("final_rank").to_numpy()
    assert (rank[layer == LAYERS] == 1).all()
    assert (rank[layer < LAYERS] != 1).any()  # the noisy map does change predictions
    last = table.filter(pa.compute.equal(table.column("layer"), LAYERS))
    np.testing.assert_allclose(
        last.column("surprisal").to_numpy(),
        -np.log(last.column("top1_prob").to_numpy()),
        atol=1e-5,
    )
    values = metric_values(table, [1, 2, 5, 10])
    for small, large in ((1, 2), (2, 5), (5, 10)):
        assert (values[f"precision@{small}"] <= values[f"precision@{large}"]).all()
    summary = prediction_summary(
        {"mat": table, "id": decode(work, "id", None, "id2")},
        model="m",
        corpus="c",
        settings=IntervalSettings(top_k=(1, 5, 10), bootstrap=200, confidence_level=0.95),
        seed=0,
    )
    assert summary.num_rows == 2 * (LAYERS + 1) * 6
    rows = summary.to_pylist()
    for method in ("id", "mat"):
        for layer in range(LAYERS + 1):
            means = {
                r["metric"]: r["mean"]
                for r in rows
                if r["method"] == method and r["layer"] == layer
            }
            assert means["precision@1"] <= means["precision@5"] <= means["precision@10"]
            if layer == LAYERS:
                assert means["precision@1"] == 1.0


def test_examples_show_context_and_top5(validation, tmp_path):
    kind, work, identity, _ = validation
    prediction_examples(
        str(work / "m"),
        str(work / "val"),
        str(work / "sentences.parquet"),
        {"id": None, "mat": identity},
        str(tmp_path / "ex.parquet"),
        str(tmp_path / "ex.md"),
        str(tmp_path / "ex.html"),
        model="tiny",
        corpus="c",
        settings={"examples": 3, "example_layers": []},
        threads=1,
    )
    table = read_table(tmp_path / "ex.parquet").to_pylist()
    layers = example_layers([], LAYERS)
    assert {(r["method"], r["layer"]) for r in table} == {("model", LAYERS)} | {
        (m, layer) for m in ("id", "mat") for layer in layers
    }
    assert len({r["sentence_id"] for r in table}) == 3
    assert all(1 <= r["rank"] <= 5 for r in table)
    contexts = {r["context"] for r in table}
    if kind == "bert-mlm":
        assert all("[MASK]" in c and "[CLS]" not in c for c in contexts)
    text = (tmp_path / "ex.md").read_text()
    assert "| model, layer 3 |" in text and text.count("## Sentence") == 3
    page = (tmp_path / "ex.html").read_text()  # the same as the report shows it
    assert page.count("<h3>Sentence") == 3 and "<td>model, layer 3</td>" in page
    assert page.count("<table>") == 3 and "|---" not in page
    # identity maps: mat's top-5 equals id's at every shown layer
    top = {(r["sentence_id"], r["method"], r["layer"], r["rank"]): r["token_id"] for r in table}
    for (sid, method, layer, rank), token in top.items():
        if method == "mat":
            assert top[(sid, "id", layer, rank)] == token


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert-mlm"])
def test_examples_tokenizer_tokenises_as_the_models_own(kind, tmp_path):
    """The tokenizer the examples job reads from tokenizer.json alone gives the cached model's
    tokenizer's ids, special tokens and text."""
    cache_model(kind, {"source": str(save_model(kind, tmp_path / "src", layers=2))}, tmp_path / "m")
    light, (_, own, _) = load_tokenizer(tmp_path / "m"), load_cached(tmp_path / "m")
    texts = SENTENCES * 2
    assert light(texts)["input_ids"] == own(texts)["input_ids"]
    assert light.all_special_ids == own.all_special_ids
    assert light.mask_token_id == own.mask_token_id
    for ids in own(texts)["input_ids"]:
        assert light.decode(ids) == own.decode(ids)
        assert [light.decode([t]) for t in ids] == [own.decode([t]) for t in ids]


def test_example_layers():
    assert example_layers([], 30) == [5, 10, 15, 20]
    assert example_layers([], 2) == [0, 1]
    assert example_layers([4, 2, 4], 12) == [2, 4]
    with pytest.raises(ValueError, match=r"\[12\] are outside 0..11"):
        example_layers([3, 12], 12)


def naive_bootstrap(values, resamples, seed, level):
    rng = np.random.default_rng(seed)
    n = len(values)
    means = []
    for _ in range(resamples):
        sample = values[rng.integers(n, size=n)]
        means.append(np.nanmean(sample, axis=0))
    tail = (1 - level) / 2
    return np.quantile(np.array(means), [tail, 1 - tail], axis=0)


def test_bootstrap_matches_a_plain_resampling_loop():
    rng = np.random.default_rng(5)
    values = np.stack([rng.normal(size=60), rng.integers(0, 2, size=60) * 1.0], axis=1)
    values[rng.integers(0, 60, size=7), 0] = np.nan  # positions without a gold token
    mean, low, high, n = bootstrap_means(values, 300, seed=9, level=0.9)
    want_low, want_high = naive_bootstrap(values, 300, 9, 0.9)
    np.testing.assert_allclose(low, want_low, rtol=1e-12)
    np.testing.assert_allclose(high, want_high, rtol=1e-12)
    np.testing.assert_allclose(mean, np.nanmean(values, axis=0), rtol=1e-12)
    assert list(n) == [np.isfinite(values[:, 0]).sum(), 60]
    assert (low <= mean).all() and (mean <= high).all() and (low < high).all()
    again = bootstrap_means(values, 300, seed=9, level=0.9)
    for a, b in zip(again, (mean, low, high, n), strict=True):
        assert np.array_equal(a, b)


def test_markdown_escapes_table_cells():
    table = pa.table(
        {
            "sentence_id": [1, 1],
            "context": ["a | b", "a | b"],
            "gold": ["x", "x"],
            "method": ["model", "id"],
            "layer": [2, 0],
            "rank": [1, 1],
            "token_id": [3, 4],
            "token": ["|", "y"],
            "probability": [0.5, 0.25],
        }
    )
    text = examples_markdown(table, "t", "causal")
    assert "a \\| b" in text and "| \\| (0.50) |" in text and "| id, layer 0 | y (0.25) |" in text


def test_replaced_runs_sit_beside_the_layer_shortcuts_on_their_sentences():
    """submodule_table's scores: each variant's rows, in the order the runs first name them,
    then each layer shortcut's rows at the sentences the runs scored (and no others)."""
    runs = pa.table({"method": ["b", "a", "b", "a"], "sentence_id": [3, 3, 5, 5]})
    shortcut = pa.table({"method": ["id"] * 4, "sentence_id": [1, 3, 5, 7], "layer": [0] * 4})
    scores = beside_layer_shortcuts(runs, {"id": shortcut, "mat": shortcut})
    assert list(scores) == ["b", "a", "id", "mat"]
    assert scores["b"].column("method").to_pylist() == ["b", "b"]
    assert scores["mat"].column("sentence_id").to_pylist() == [3, 5]
