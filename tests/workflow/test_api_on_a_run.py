"""The Python API and the command line on the finished tiny run: the README's example runs, and
the API reproduces the workflow's numbers."""

import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import waits
import yaml
from harness import ROOT, python_example

pytestmark = pytest.mark.workflow


def test_readme_api_example_runs(tiny_run, tmp_path):
    workdir = tiny_run
    code = python_example(ROOT / "README.md", "**Python API**").replace(
        'RESULTS, MODEL, CORPUS = "results", "smollm2", "news"',
        f'RESULTS, MODEL, CORPUS = "{workdir / "results"}", "gpt", "mini"',
    )
    assert str(workdir) in code
    proc = waits.run(
        [sys.executable, "-c", code], 300, "the README's example", cwd=tmp_path, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "lens.png").stat().st_size and (tmp_path / "shared/maps").is_dir()


def test_api_reproduces_the_workflow_numbers(tiny_run, tmp_path):
    from jtc.api import Lens, ShortcutMismatch, Shortcuts
    from jtc.cli import main
    from jtc.data.states import read_aligned, read_states
    from jtc.model.cache import load_cached
    from jtc.shortcuts.quality import r2_score

    workdir = tiny_run
    results = workdir / "results"
    exported = Shortcuts.from_results(results, "gpt", "mini", "mat").export(
        tmp_path / "shared", results=results
    )
    mat = Shortcuts.load(exported)
    description = yaml.safe_load((exported / "description.json").read_text())
    n_train = yaml.safe_load((workdir / "config.yaml").read_text())["sizes"]["train"]
    assert description["model"] == "gpt" and description["fit_statistics"]["n_train"] == n_train
    solvers = description["fit_statistics"]["solvers"]  # per source layer
    assert set(solvers) == {"0", "1"} and set(solvers.values()) <= {"cholesky", "pinv"}
    assert set(description["fit_statistics"]["validation_r2"]) == {"0->1", "0->2", "1->2"}
    val = results / "hidden/gpt/mini/validation"
    ids, h0 = read_states(val, 0)
    h2 = read_aligned(val, 2, ids)
    r2 = pq.read_table(results / "metrics/gpt/mini/r2.parquet").to_pylist()
    want = next(
        r["r2"]
        for r in r2
        if r["method"] == "mat" and (r["source_layer"], r["target_layer"]) == (0, 2)
    )
    assert r2_score(h2, mat.apply(h0, source=0)) == want

    # Precision@1 of mat from layer 1, through the API's head, equals the workflow's table
    net, tokenizer, info = load_cached(results / "models/gpt")
    lens = Lens(net, tokenizer, info, [mat])
    h1 = read_aligned(val, 1, ids, np.float32)
    final = read_aligned(val, 2, ids, np.float32)
    import torch

    with torch.no_grad():
        mapped = torch.tensor(mat.apply(h1, source=1), dtype=torch.float32)
        shortcut_top1 = lens.head.logits(mapped).argmax(1).numpy()
        final_top1 = lens.head.logits(torch.tensor(final)).argmax(1).numpy()
    prediction = pq.read_table(results / "metrics/gpt/mini/prediction.parquet").to_pylist()
    table_p1 = next(
        r["mean"]
        for r in prediction
        if (r["method"], r["layer"], r["metric"]) == ("mat", 1, "precision@1")
    )
    assert np.mean(shortcut_top1 == final_top1) == pytest.approx(table_p1, abs=1e-12)

    # a model of another depth or width is refused
    depth = r"\(num_layers 2\); the model given has num_layers 5"
    with pytest.raises(ShortcutMismatch, match=depth):
        mat.check_model({**info, "num_layers": 5})
    with pytest.raises(ShortcutMismatch, match="width 7"):
        mat.apply(np.zeros((3, 7)), source=0)
    with pytest.raises(ShortcutMismatch, match="not a jtc shortcut export"):
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad/description.json").write_text('{"format": "other"}')
        Shortcuts.load(tmp_path / "bad")

    # the lens view and the command
    text = "the king of the city was known for"
    table = lens.predictions(text, k=3).to_pylist()
    tokens = len(tokenizer(text)["input_ids"])
    assert len(table) == 1 * 3 * tokens * 3  # method × layers × positions × k
    out = tmp_path / "lens.png"

    def lens_command(corpus):
        args = [*args_for(results)[:-1], corpus]
        return main(["lens", *args, "--text", text, "--out", str(out)])

    assert lens_command("mini") == 0 and out.stat().st_size
    assert lens_command("nope") == 2  # no maps fitted on that corpus: a message, not a trace
    assert main(["export", *args_for(results), "--out", str(tmp_path / "cli-export")]) == 0
    assert Shortcuts.load(tmp_path / "cli-export").weight(0, 2).shape == (16, 16)


def args_for(results):
    return ["--results", str(results), "--model", "gpt", "--corpus", "mini"]
