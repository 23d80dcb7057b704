"""Which fitted maps a results folder holds, and why it has none of a method for a model and
corpus, naming what it has instead (for jtc.api and the `jtc` command)."""

from __future__ import annotations

from pathlib import Path

from jtc import paths


def _names(folder: Path, suffix: str | None = None) -> str:
    """What a results folder holds: its sub-folders, or its files ending in `suffix` (without
    it), for an error message."""
    if not folder.is_dir():
        return "none"
    if suffix is None:
        found = [p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
    else:
        found = [p.name.removesuffix(suffix) for p in folder.glob(f"*{suffix}")]
    return ", ".join(sorted(found)) or "none"


def results_problem(results: str | Path, model: str, corpus: str, method: str) -> str | None:
    """Why a results folder has no maps of a known `method` for `model` on `corpus`, naming
    what it has instead."""
    from jtc.shortcuts.methods import METHODS

    results = Path(results)
    if not results.is_dir():
        return (
            f"no results folder {results}: run the workflow first, or give the folder it wrote "
            f"(--results)"
        )
    model_dir = paths.under(results, paths.MODEL, model=model)
    if not (model_dir / "info.json").is_file():
        return f"no model '{model}' in {results} (models there: {_names(model_dir.parent)})"
    if method == "id":  # the identity: no maps, any corpus
        return None
    path = paths.under(results, paths.MAP, model=model, corpus=corpus, method=method)
    if not path.parent.is_dir():
        return (
            f"no maps of model '{model}' on corpus '{corpus}' in {results} (corpora with maps: "
            f"{_names(path.parent.parent)})"
        )
    if not path.is_file():
        fitted = ", ".join(
            n for n in _names(path.parent, ".safetensors").split(", ") if n in METHODS
        )
        return (
            f"no fitted '{method}' maps for model '{model}' on corpus '{corpus}' (fitted there: "
            f"{fitted or 'none'}); add '{method}' to the config's methods and rerun the workflow"
        )
    return None
