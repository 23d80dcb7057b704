"""Stage functions stay thin (docs/design.md): a stage reads its inputs, calls the library and
writes its outputs; the work, and every loop over layers, methods, files or rows, is the
library's.

Checked on every module-level function of every module in src/jtc/stages/, public or private
(a private helper there is stage code too, and belongs in the library):

- at most MAX_LINES logic lines. A logic line is a source line covered by one of the function's
  statements (functions nested in it included), not counting docstrings, import statements,
  blank lines and comment-only lines. Lines, not statements: a call with its arguments laid
  out one a line counts each of those lines, so a stage that passes many values counts them.
- no loop: no `for` or `while` statement and no comprehension (list, set, dict or generator)
  anywhere in a stage module.

Each offender is printed with its count (or its loops' lines)."""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize
from pathlib import Path

STAGES = Path(__file__).parents[2] / "src" / "jtc" / "stages"
MAX_LINES = 40
LOOPS = (
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


def _docstring_lines(node: ast.AST) -> set[int]:
    """The lines of the docstrings of `node` and of every function or class nested in it."""
    lines: set[int] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = inner.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def _code_lines(source: str) -> set[int]:
    """The lines of `source` that hold a token other than a comment or a line break."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip and token.type != tokenize.ENDMARKER:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines


def logic_lines(function: ast.FunctionDef, source: str) -> int:
    """The logic lines of `function` (parsed from `source`), as the module docstring says."""
    lines: set[int] = set()
    for statement in function.body:
        lines.update(range(statement.lineno, statement.end_lineno + 1))
    for node in ast.walk(function):
        if isinstance(node, ast.Import | ast.ImportFrom):
            lines.difference_update(range(node.lineno, node.end_lineno + 1))
    return len((lines - _docstring_lines(function)) & _code_lines(source))


def _modules() -> list[tuple[Path, str, ast.Module]]:
    paths = sorted(STAGES.glob("*.py"))
    assert len(paths) > 5, f"no stage modules found in {STAGES}"
    return [(p, p.read_text(), ast.parse(p.read_text())) for p in paths]


def _functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def test_stage_functions_have_at_most_40_logic_lines():
    counts = {
        f"{path.stem}.{function.name}": logic_lines(function, source)
        for path, source, tree in _modules()
        for function in _functions(tree)
    }
    assert len(counts) > 20
    fat = {name: n for name, n in counts.items() if n > MAX_LINES}
    for name, n in sorted(fat.items(), key=lambda item: -item[1]):
        print(f"{name}: {n} logic lines (at most {MAX_LINES})")
    assert not fat, f"stage functions over {MAX_LINES} logic lines: {fat}"


def test_stage_modules_have_no_loops():
    found: dict[str, list[str]] = {}
    for path, _, tree in _modules():
        loops = [n for n in ast.walk(tree) if isinstance(n, LOOPS)]
        if loops:
            found[path.stem] = [f"{type(n).__name__} at line {n.lineno}" for n in loops]
    for module, hits in found.items():
        print(f"stages/{module}.py: {len(hits)} loops: {', '.join(hits)}")
    assert not found, f"loops in stage modules (they belong in the library): {found}"


SAMPLE = textwrap.dedent(
    '''
    def stage(a: str, out: str, *, model: str) -> None:
        """A docstring
        over three
        lines."""
        import numpy as np

        from jtc.files.io import (
            read_table,
            write_table,
        )

        # a comment line
        table = read_table(a)  # a trailing comment

        def inner(x):
            """Nested docstring."""
            return x

        write_table(
            inner(table),
            out,
        )
        if model:
            pass
    '''
)


def test_logic_lines_count_statement_lines_without_docstrings_imports_or_comments():
    tree = ast.parse(SAMPLE)
    (function,) = _functions(tree)
    # table = ...; def inner; return x; write_table( + 2 argument lines + ); if; pass
    assert logic_lines(function, SAMPLE) == 9


def test_loops_are_found_in_every_form():
    tree = ast.parse("for a in b:\n    pass\nx = [a for a in b]\ny = {a: 1 for a in b}\n")
    assert [type(n) for n in ast.walk(tree) if isinstance(n, LOOPS)] == [
        ast.For,
        ast.ListComp,
        ast.DictComp,
    ]
