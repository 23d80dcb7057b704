"""The download stage run for real: a Leipzig archive and a MediaWiki dump, each in the format
its source ships, served over HTTP from 127.0.0.1 with their sha256 in the config, carried
through to the r² tables of a tiny random model. A wrong checksum stops the run with the
message and leaves nothing a later run would read; the config fixed, the rerun downloads and
goes on; a changed timeout or max_seconds reruns nothing."""

import hashlib

import pyarrow.parquet as pq
import pytest
from archives import make_leipzig, make_mediawiki_dump, sentences
from harness import make_tiny_project, rules_run, run_snakemake, write_config
from http_files import serving

pytestmark = pytest.mark.workflow

# no proxy for the loopback server, whatever the environment names
ENV = {"http_proxy": "", "HTTP_PROXY": "", "no_proxy": "127.0.0.1,localhost"}


def articles(count=20, per_article=6):
    """{title: wikitext} of `count` articles, each a paragraph of `per_article` sentences with
    some markup, and a heading and a list that are dropped."""
    lines = sentences(count * per_article, seed=2)
    return {
        f"Article {i}": (
            f"'''Article {i}''' {{{{Infobox|x=1}}}}"
            + " ".join(lines[i * per_article : (i + 1) * per_article])
            + "<ref>A source.</ref>\n== See also ==\n* [[Article 0]]"
        )
        for i in range(count)
    }


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_corpora_downloaded_over_http_reach_the_r2_tables(tmp_path):
    work = make_tiny_project(tmp_path / "work", models=("gpt",), sentences=10)
    leipzig = make_leipzig(tmp_path / "eng_news.tar.gz", sentences(160, seed=1))
    dump = make_mediawiki_dump(
        tmp_path / "testwiki-pages-articles.xml.bz2",
        articles(),
        [("Redirected", 0, "#REDIRECT [[Article 1]]", "Article 1"), ("Talk:X", 1, "Talk.", None)],
    )
    downloads, corpora = work / "data/downloads", work / "results/corpora"
    with serving() as server:
        leip = {"source": "leipzig", "url": server.add("/eng_news.tar.gz", leipzig.read_bytes())}
        wiki = {
            "source": "mediawiki",
            "url": server.add("/testwiki.xml.bz2", dump.read_bytes()),
            "timeout": 10,
            "max_seconds": 120,
        }
        leip["sha256"], wiki["sha256"] = sha256(leipzig), "0" * 64  # the dump's is wrong
        config = make_config(work, leip, wiki)
        target = "results/corpora/wiki.parquet"
        failed = run_snakemake(work, target, check=False, env=ENV)
        assert failed.returncode != 0
        log = (work / "logs/download_corpus/wiki.xml.bz2.log").read_text()
        assert f"checksum mismatch for {wiki['url']}" in log and "corpora.wiki.sha256" in log
        # the run stops with the message on the terminal too, the fix named
        assert "Error in rule download_corpus" in failed.stderr
        assert f"checksum mismatch for {wiki['url']}" in failed.stderr
        assert "Check corpora.wiki.url and corpora.wiki.sha256" in failed.stderr
        # nothing a run reads: no download, no partial file, no sentence table; only the
        # rejected file, set aside for inspection
        assert sorted(p.name for p in downloads.iterdir()) == ["wiki.xml.bz2.rejected"]
        assert not corpora.exists() or not any(corpora.iterdir())

        # the checksum fixed: the rerun downloads the dump again and runs on to the tables
        config["corpora"]["wiki"]["sha256"] = sha256(dump)
        write_config(work, config)
        tables = [f"results/metrics/gpt/{name}/r2.parquet" for name in ("leip", "wiki")]
        done = run_snakemake(work, *tables, env=ENV)
        assert rules_run(done)["download_corpus"] == 2
        assert server.requests == {"/testwiki.xml.bz2": 2, "/eng_news.tar.gz": 1}
    assert sorted(p.name for p in downloads.iterdir()) == ["leip.tar.gz", "wiki.xml.bz2"]
    assert (downloads / "wiki.xml.bz2").read_bytes() == dump.read_bytes()

    leip_table = pq.read_table(corpora / "leip.parquet").to_pydict()
    assert len(leip_table["text"]) == 160
    assert set(leip_table["document"]) == {f"leipzig-{i}" for i in range(1, 161)}
    wiki_table = pq.read_table(corpora / "wiki.parquet").to_pydict()
    assert len(wiki_table["text"]) == 120  # the 20 articles' sentences: no redirect, no talk
    assert set(wiki_table["document"]) == {f"Article {i}" for i in range(20)}
    for table in tables:
        r2 = pq.read_table(work / table).to_pylist()
        assert r2 and all(row["method"] in ("id", "mat") for row in r2)

    # how long a download may wait or take changes no result: new limits rerun nothing
    config["corpora"]["wiki"]["timeout"] = 30
    config["corpora"]["wiki"]["max_seconds"] = 600
    write_config(work, config)
    assert rules_run(run_snakemake(work, *tables, env=ENV)) == {}


def make_config(work, leip, wiki):
    """The tiny project's config (gpt only, id and mat) on the two downloaded corpora."""
    from harness import read_config

    config = read_config(work)
    config["corpora"] = {"leip": leip, "wiki": wiki}
    config["methods"] = ["id", "mat"]
    write_config(work, config)
    return config
