"""No module of jtc grows past 450 lines: a module that long holds more than one job, and is
split by role before it grows further (docs/design.md, "Repository layout")."""

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "jtc"
MOST_LINES = 450


def long_modules(root: Path, most: int) -> dict[str, int]:
    """{module path under root: its line count} of the Python files over `most` lines."""
    counts = {
        str(path.relative_to(root)): len(path.read_text().splitlines())
        for path in sorted(root.rglob("*.py"))
    }
    return {name: count for name, count in counts.items() if count > most}


def test_the_count_sees_a_long_module(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * 3)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * 5)
    assert long_modules(tmp_path, 4) == {"pkg/long.py": 5}


def test_no_module_of_the_package_is_over_the_limit():
    assert long_modules(SRC, MOST_LINES) == {}, f"modules over {MOST_LINES} lines: split by role"
