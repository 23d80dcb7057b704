"""Corpora: sentence splitting, the sentence table, Leipzig archives and downloads."""

import hashlib
import os

import pytest
from archives import make_tar

from jtc.data import corpus, downloads, sources
from jtc.data.corpus import CorpusError

LEIPZIG_LINES = [
    f"{i}\tThis is sentence number {i} of the small test corpus." for i in range(1, 41)
]


def leipzig_archive(path):
    body = ("\n".join(LEIPZIG_LINES) + "\n").encode()
    return make_tar(
        path,
        [
            ("eng_test_10K/eng_test_10K-sentences.txt", body, "file"),
            ("eng_test_10K/eng_test_10K-words.txt", b"1\tword\n", "file"),
        ],
    )


def test_split_sentences_keeps_abbreviations():
    text = "Mr. Smith went to Washington. He arrived at 5 p.m. on Monday! Did the U.S. agree? Yes."
    assert corpus.split_sentences(text) == [
        "Mr. Smith went to Washington.",
        "He arrived at 5 p.m. on Monday!",
        "Did the U.S. agree?",
        "Yes.",
    ]


def test_clean_sentence_rules():
    assert corpus.clean_sentence("  The   cat sat on the mat. ") == "The cat sat on the mat."
    assert corpus.clean_sentence("Too short.") is None
    assert corpus.clean_sentence("{{Infobox}} a b c d e") is None
    assert corpus.clean_sentence("broken \ufffd bytes in this line here") is None
    assert corpus.clean_sentence(" ".join(["word"] * 200)) is None


def test_wiki_markup_is_stripped():
    text = (
        "'''Anarchism''' is a [[political philosophy|philosophy]] that {{cite|x={{y}}}} "
        "rejects [[hierarchy]].<ref>Some ref</ref>"
    )
    assert " ".join(sources.strip_wiki_markup(text).split()) == (
        "Anarchism is a philosophy that rejects hierarchy."
    )


def test_sentence_table_is_deterministic_and_split_by_text():
    pairs = [(f"Sentence number {i} is here today.", "doc") for i in range(500)]
    a = corpus.sentence_table(pairs, "t", seed=0, validation_fraction=0.25)
    b = corpus.sentence_table(pairs, "t", seed=0, validation_fraction=0.25)
    assert a.equals(b)
    val = a.column("split").to_pylist().count("validation")
    assert 80 < val < 170
    c = corpus.sentence_table(pairs[:300], "t", seed=0, validation_fraction=0.25)
    assert c.column("split").to_pylist() == a.column("split").to_pylist()[:300]
    d = corpus.sentence_table(pairs, "t", seed=1, validation_fraction=0.25)
    assert d.column("split").to_pylist() != a.column("split").to_pylist()


def test_duplicates_dropped_and_select_split_counts():
    pairs = [("The same sentence is repeated here.", "d")] * 5 + [
        (f"Another distinct sentence number {i}.", "d") for i in range(20)
    ]
    table = corpus.sentence_table(pairs, "t", 0, 0.5)
    assert table.num_rows == 21
    n_train = table.column("split").to_pylist().count("train")
    assert corpus.select_split(table, "train", n_train, "t").num_rows == n_train
    with pytest.raises(CorpusError, match=f"has {n_train} train sentences but {n_train + 1}"):
        corpus.select_split(table, "train", n_train + 1, "t")


def test_text_file_with_odd_bytes(tmp_path):
    path = tmp_path / "text.txt"
    path.write_bytes(
        b"A perfectly fine sentence is here.\n\n\xff\xfe broken bytes are in this one.\n"
        b"Another fine sentence is on this line.\n"
    )
    table = corpus.sentence_table(sources.read_text_file(path), "mine", 0, 0.25)
    assert table.column("text").to_pylist() == [
        "A perfectly fine sentence is here.",
        "Another fine sentence is on this line.",
    ]


def test_leipzig_archive_is_read_without_extracting(tmp_path):
    archive = leipzig_archive(tmp_path / "c.tar.gz")
    pairs = list(sources.read_leipzig(archive))
    assert len(pairs) == 40 and pairs[0][0].startswith("This is sentence number 1 ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tar.gz"]


@pytest.mark.parametrize(
    "name,data,kind,problem",
    [
        ("/etc/evil-sentences.txt", b"x", "file", "absolute"),
        ("../evil-sentences.txt", b"x", "file", r"\.\."),
        ("a/link-sentences.txt", "/etc/passwd", "symlink", "link"),
        ("a/hard-sentences.txt", "../../etc/passwd", "hardlink", "link"),
    ],
)
def test_hostile_archives_are_refused(tmp_path, name, data, kind, problem):
    archive = make_tar(tmp_path / "bad.tar.gz", [(name, data, kind)])
    with pytest.raises(CorpusError, match=problem):
        list(sources.read_leipzig(archive))


def test_download_checks_sha256(tmp_path):
    archive = leipzig_archive(tmp_path / "src.tar.gz")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    dest = tmp_path / "data" / "c.tar.gz"
    assert downloads.download(archive.as_uri(), dest, digest) == digest
    assert dest.read_bytes() == archive.read_bytes()

    bad = tmp_path / "data" / "d.tar.gz"
    with pytest.raises(CorpusError, match="checksum mismatch"):
        downloads.download(archive.as_uri(), bad, "0" * 64)
    assert not bad.exists()
    assert (tmp_path / "data" / "d.tar.gz.rejected").read_bytes() == archive.read_bytes()


def test_unreachable_url(tmp_path):
    with pytest.raises(CorpusError, match="cannot download"):
        downloads.download((tmp_path / "missing.tar.gz").as_uri(), tmp_path / "x.tar.gz", None)


# --- bounded inputs --------------------------------------------------------------------------

DEV_ZERO = "/dev/zero"
needs_dev_zero = pytest.mark.skipif(not os.path.exists(DEV_ZERO), reason="no /dev/zero")


def test_text_file_refuses_directories_and_devices(tmp_path):
    with pytest.raises(CorpusError, match="is a directory, not a regular file"):
        list(sources.read_text_file(tmp_path))
    with pytest.raises(CorpusError, match="does not exist"):
        list(sources.read_text_file(tmp_path / "missing.txt"))
    if os.path.exists(DEV_ZERO):
        with pytest.raises(CorpusError, match="'/dev/zero' is a character device"):
            list(sources.read_source({"source": "text_file", "path": DEV_ZERO}))


def test_text_file_larger_than_its_limit_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "text.txt"
    path.write_text("A perfectly fine sentence is here.\n" * 100)  # 3,500 bytes
    with pytest.raises(CorpusError, match=r"is 3500 bytes, more than the limit of 1000 bytes"):
        list(sources.read_source({"source": "text_file", "path": str(path), "max_bytes": 1000}))
    monkeypatch.setattr(sources, "MAX_TEXT_FILE_BYTES", 3499)  # the default limit
    with pytest.raises(CorpusError, match="limit of 3499 bytes"):
        list(sources.read_text_file(path))
    assert len(list(sources.read_text_file(path, max_bytes=3500))) == 100


@needs_dev_zero
def test_an_endless_stream_is_cut_at_the_limit(monkeypatch):
    """/dev/zero passed off as a file (stat size 0): the bytes read are capped, not the size."""
    monkeypatch.setattr(sources, "file_problem", lambda path: None)
    with pytest.raises(CorpusError, match="more than the limit of 5000 bytes"):
        list(sources.read_text_file(DEV_ZERO, max_bytes=5000))


def test_overlong_lines_are_skipped_with_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(sources, "MAX_LINE_CHARS", 50)
    path = tmp_path / "text.txt"
    path.write_bytes(
        b"A perfectly fine sentence is here.\r\n"
        + b"x" * 500
        + b"\nAnother fine sentence is on this line.\n"
        + b"y" * 51
        + b"\n"
        + b"z" * 50
        + b"\nLast line has no newline at all"
    )
    with caplog.at_level("WARNING"):
        pairs = list(sources.read_text_file(path))
    assert [(line.rstrip("\n"), doc) for line, doc in pairs] == [
        ("A perfectly fine sentence is here.", "line-1"),
        ("Another fine sentence is on this line.", "line-3"),
        ("z" * 50, "line-5"),
        ("Last line has no newline at all", "line-6"),
    ]
    assert "skipped 2 lines longer than 50 characters (the first is line 2)" in caplog.text


def test_leipzig_overlong_line_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "MAX_LINE_CHARS", 100)
    body = (
        "\n".join([*LEIPZIG_LINES[:2], "3\t" + "w " * 200, *LEIPZIG_LINES[3:5]]) + "\n"
    ).encode()
    archive = make_tar(tmp_path / "c.tar.gz", [("x/x-sentences.txt", body, "file")])
    assert [d for _, d in sources.read_leipzig(archive)] == [
        "leipzig-1",
        "leipzig-2",
        "leipzig-4",
        "leipzig-5",
    ]


def test_line_count_while_planning_matches_iteration(tmp_path):
    for data in (b"", b"a", b"a\n", b"a\nb", b"a\n\nb\n", b"\n" * 5):
        path = tmp_path / "t.txt"
        path.write_bytes(data)
        with open(path, "rb") as handle:
            assert sources._count_lines(path) == sum(1 for _ in handle)


def test_download_larger_than_its_limit_is_refused_and_deleted(tmp_path, monkeypatch):
    archive = leipzig_archive(tmp_path / "src.tar.gz")
    size = archive.stat().st_size
    dest = tmp_path / "data" / "c.tar.gz"
    with pytest.raises(CorpusError, match=rf"is {size} bytes, more than the limit of {size - 1}"):
        downloads.download(archive.as_uri(), dest, None, max_bytes=size - 1)
    assert list((tmp_path / "data").iterdir()) == []
    monkeypatch.setattr(sources, "MAX_DOWNLOAD_BYTES", size - 1)  # the default limit
    with pytest.raises(CorpusError, match=f"limit of {size - 1} bytes"):
        downloads.download(archive.as_uri(), dest, None)
    downloads.download(archive.as_uri(), dest, None, max_bytes=size)
    assert dest.read_bytes() == archive.read_bytes()


@needs_dev_zero
def test_download_of_a_device_is_refused(tmp_path, monkeypatch):
    dest = tmp_path / "data" / "c.tar.gz"
    with pytest.raises(CorpusError, match="'/dev/zero' is a character device"):
        downloads.download("file:///dev/zero", dest, None)
    with pytest.raises(CorpusError, match="is a directory"):
        downloads.download(tmp_path.as_uri(), dest, None)
    # past the check (as an endless HTTP body would be): cut at the limit, the part deleted
    monkeypatch.setattr(sources, "file_problem", lambda path: None)
    with pytest.raises(CorpusError, match=r"has more than the limit of 3145728 bytes; refused"):
        downloads.download("file:///dev/zero", dest, None, max_bytes=3 << 20)
    assert list((tmp_path / "data").iterdir()) == []
