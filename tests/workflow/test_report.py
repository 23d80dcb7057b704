"""The report of the finished tiny run (`snakemake --report`): every figure and table, and read
in a headless browser, every table and the headline numbers."""

import re

import pyarrow.parquet as pq
import pytest
import waits
from harness import run_snakemake, snapshot

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def tiny_report(_tiny_run, tmp_path_factory):
    """The shared tiny run's report (`snakemake --report`), made once for the tests that read
    it; making it changes nothing under the run's results/."""
    workdir, _ = _tiny_run
    report = tmp_path_factory.mktemp("report") / "report.html"
    before = snapshot(workdir)
    run_snakemake(workdir, "--report", str(report))
    assert snapshot(workdir) == before, "the report changed the shared tiny run"
    return report


def test_report_holds_every_figure_and_table(tiny_run, tiny_report):
    workdir = tiny_run
    html = tiny_report.read_text()
    figures = sorted((workdir / "results/figures").rglob("*.png"))
    tables = [
        workdir / f"results/metrics/{model}/mini/{name}"
        for model in ("gpt", "bert")
        for name in (
            "r2.html",
            "prediction.html",
            "early_exit.html",
            "early_exit_savings.html",
            "examples.html",
            "parameters.html",
        )
    ]
    assert len(figures) == 2 * 3  # per model: r2, prediction, early_exit
    for path in figures + tables:
        assert str(path.relative_to(workdir)) in html, path
        assert path.stat().st_size
    assert "How well each shortcut method predicts" in html  # captions are rendered
    # the landing page states the experiment from the config
    assert "Linear shortcuts between transformer layers" in html
    assert re.search(r"Models: (bert, gpt|gpt, bert)\.", html) and "Methods: id, mat." in html
    # one labelling scheme: every item is a table or a figure, named by what it shows
    assert '"kind"' in html and '"result"' in html
    assert '"table": ' not in html and '"figure": ' not in html


# each table the report lists (by its label), and the Parquet file its page shows
REPORT_TABLES = {
    "r² of every layer pair": "r2",
    "prediction metrics by layer": "prediction",
    "example predictions": "examples",
    "early exit: λ sweep and fixed exits": "early_exit",
    "early exit: layers saved": "early_exit_savings",
    "parameters per method": "parameters",
}
SHOW = """(() => {{ const row = Array.from(document.querySelectorAll('tr'))
    .find(r => r.cells.length > 1 && r.cells[1].innerText.trim() === {label!r});
  if (!row) return false; row.querySelector('a[iconname=eye]').click(); return true; }})()"""
OPEN_CATEGORY = """(() => {{ const a = Array.from(document.querySelectorAll('a'))
  .find(a => a.innerText.trim() === {name!r});
  if (!a) return false; a.click(); return true; }})()"""


def shown_page(browser, category, label):
    """The text of the table `label` of `category` as the report shows it: the report opened,
    the category clicked in the menu, the row's eye button clicked, the page's frame read."""
    from browser import BrowserError

    browser.evaluate("location.reload()")
    browser.wait_for_event("Page.loadEventFired")
    browser.wait_until(OPEN_CATEGORY.format(name=category))
    browser.wait_until(SHOW.format(label=label))

    def page_text():  # once the page's frame has loaded its data: URL
        frames = [f for f in browser.child_frames() if f.get("url", "").startswith("data:")]
        try:
            return frames and browser.evaluate("document.body.innerText", frames[0]["id"])
        except BrowserError:  # (the frame navigated while it was read: read it again)
            return ""

    return waits.wait_for(page_text, 20, f"the page of {category}: {label} to show")


def test_report_read_in_a_browser_shows_every_table_and_the_headline_numbers(tiny_run, request):
    """A person's view: the report opened in headless Chromium, every table clicked open."""
    from browser import Browser, find_chromium

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium (bash tests/install_chromium.sh installs it)")
    workdir = tiny_run
    report = request.getfixturevalue("tiny_report")  # (made only where Chromium is)
    headline = pq.read_table(workdir / "results/metrics/headline.parquet").to_pylist()
    assert {(r["model"], r["method"]) for r in headline} == {
        (m, method) for m in ("gpt", "bert") for method in ("id", "mat")
    }
    with Browser(chromium) as browser:
        browser.open(report)
        landing = browser.wait_until(
            "document.body.innerText.includes('Headline numbers') && document.body.innerText"
        )
        # the landing page: the experiment, and each model's numbers read from results/
        assert re.search(r"Models: (bert, gpt|gpt, bert)\.", landing)
        assert "Methods: id, mat." in landing
        for row in headline:
            assert f"{row['model']} on {row['corpus']}" in landing
            assert f"{row['r2_middle_to_last']:.3f}" in landing
            assert f"From layer {row['middle_layer']} of {row['layers']}" in landing
            p1 = f"{100 * row['precision1_middle']:.1f}"
            assert f"**{p1}%**" not in landing and f"{p1}%" in landing  # (rendered bold)
        for model in ("gpt", "bert"):
            for label, name in REPORT_TABLES.items():
                shown = shown_page(browser, model, label)
                table = pq.read_table(workdir / f"results/metrics/{model}/mini/{name}.parquet")
                first = table.slice(0, 1).to_pylist()[0]
                if name == "examples":  # a page per sentence, with each method's top-5
                    assert f"Sentence {first['sentence_id']}" in shown, shown[:500]
                    assert first["token"].strip() in shown
                    continue
                assert f"{table.num_rows} rows" in shown, (model, label, shown[:300])
                header = next(line for line in shown.splitlines() if line.startswith("model\t"))
                assert header.split("\t") == table.column_names, (model, label, header)
                assert f"{model}\tmini\t{first['method']}" in shown, (model, label)
        shown = shown_page(browser, "summary", "headline numbers")
        assert f"{len(headline)} rows" in shown
        assert all(f"{r['r2_middle_to_last']:.4g}" in shown for r in headline)
