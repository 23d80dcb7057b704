"""Which jtc a run's jobs import (jtc.pipeline.tracking.imported_source): the checkout's src/ beside
the workflow, or, for a remote module, the installed package alone through a folder linking to
it, so that planning hashes and jobs run the same code."""

import types
from pathlib import Path

import pytest

from jtc.pipeline.tracking import code_hash, imported_source

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "workflow/scripts/r2_table.py"


def package(folder: Path) -> types.ModuleType:
    """A stand-in for the imported jtc package, its __init__.py in `folder`/jtc."""
    (folder / "jtc").mkdir(parents=True, exist_ok=True)
    init = folder / "jtc/__init__.py"
    init.touch()
    return types.SimpleNamespace(__file__=str(init))  # type: ignore[return-value]


def test_the_checkout_src_is_used_as_it_is(tmp_path):
    src = tmp_path / "checkout/src"
    assert imported_source(package(src), str(src), tmp_path / "links") == str(src)
    assert not (tmp_path / "links").exists()


def test_a_jtc_imported_from_elsewhere_than_the_checkout_is_refused(tmp_path):
    with pytest.raises(ImportError, match="imported from .*site.*not from this workflow's"):
        imported_source(package(tmp_path / "site"), str(tmp_path / "checkout/src"), tmp_path)


def test_an_installed_jtc_is_reached_through_a_folder_holding_it_alone(tmp_path):
    site = tmp_path / "site-packages"
    (site / "numpy").mkdir(parents=True)  # what else is installed stays off the jobs' path
    links = Path(imported_source(package(site), None, tmp_path / "links"))
    assert [p.name for p in links.iterdir()] == ["jtc"]
    assert (links / "jtc").resolve() == (site / "jtc").resolve()
    # again, and for another installation: the one link, to the package imported now
    assert imported_source(package(site), None, tmp_path / "links") == str(links)
    other = tmp_path / "other-site"
    imported_source(package(other), None, tmp_path / "links")
    assert [p.name for p in links.iterdir()] == ["jtc"]
    assert (links / "jtc").resolve() == (other / "jtc").resolve()


def test_the_code_hash_through_the_link_is_the_checkouts(tmp_path):
    installed = types.SimpleNamespace(__file__=str(ROOT / "src/jtc/__init__.py"))
    links = imported_source(installed, None, tmp_path / "links")  # type: ignore[arg-type]
    assert code_hash(links, SCRIPT) == code_hash(ROOT / "src", SCRIPT)
