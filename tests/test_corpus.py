"""Corpora: sentence splitting, the sentence table, Leipzig archives and downloads."""

import hashlib
import io
import tarfile

import pytest

from jtc import corpus
from jtc.corpus import CorpusError

LEIPZIG_LINES = [
    f"{i}\tThis is sentence number {i} of the small test corpus." for i in range(1, 41)
]


def make_tar(path, members):
    """members: list of (TarInfo-like dict, bytes or None)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, data
                tar.addfile(info)
    return path


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
    assert " ".join(corpus.strip_wiki_markup(text).split()) == (
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
    table = corpus.sentence_table(corpus.read_text_file(path), "mine", 0, 0.25)
    assert table.column("text").to_pylist() == [
        "A perfectly fine sentence is here.",
        "Another fine sentence is on this line.",
    ]


def test_leipzig_archive_is_read_without_extracting(tmp_path):
    archive = leipzig_archive(tmp_path / "c.tar.gz")
    pairs = list(corpus.read_leipzig(archive))
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
        list(corpus.read_leipzig(archive))


def test_download_checks_sha256(tmp_path):
    archive = leipzig_archive(tmp_path / "src.tar.gz")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    dest = tmp_path / "data" / "c.tar.gz"
    assert corpus.download(archive.as_uri(), dest, digest) == digest
    assert dest.read_bytes() == archive.read_bytes()

    bad = tmp_path / "data" / "d.tar.gz"
    with pytest.raises(CorpusError, match="checksum mismatch"):
        corpus.download(archive.as_uri(), bad, "0" * 64)
    assert not bad.exists()
    assert (tmp_path / "data" / "d.tar.gz.rejected").read_bytes() == archive.read_bytes()


def test_unreachable_url(tmp_path):
    with pytest.raises(CorpusError, match="cannot download"):
        corpus.download((tmp_path / "missing.tar.gz").as_uri(), tmp_path / "x.tar.gz", None)
