"""Files inside installed Python packages ("package:NAME/SUBPATH"), found without importing the
package (model sources and the parts of a joined model name them). Standard library only."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_path(source: str) -> Path | str:
    """The path a "package:NAME/SUBPATH" source names, or why there is none."""
    package, _, sub = source[len("package:") :].partition("/")
    found = importlib.util.find_spec(package) if package else None
    if found is None or not found.submodule_search_locations:
        return f"installed package '{package}' (not installed)"
    path = Path(list(found.submodule_search_locations)[0]) / sub
    if not path.exists():
        return f"installed package '{package}' (has no '{sub}')"
    return path
