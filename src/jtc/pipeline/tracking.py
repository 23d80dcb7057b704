"""Which code a workflow job runs, read from the import statements (standard library only, so
planning stays fast): each rule passes the hash of its script and of every `jtc` module that
script can reach as `params.code`, and Snakemake reruns the jobs whose hash changed.

A script calls one stage function, `from jtc.stages.<family> import <rule>`. What that function
can reach is its stage module's top-level imports, the imports inside the function (and inside
the module's own functions it calls), and then everything those library modules import, at any
depth, including imports inside their functions. Stage modules therefore import library modules
inside the stage functions that use them: editing `jtc.report.figures.pruning` changes the hash
of the pruning plot rule only, editing `jtc.shortcuts.closed_form` that of the fits.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

PACKAGE = "jtc"


def module_path(src: Path, name: str) -> Path | None:
    """The file of module `name` (dotted) under the source folder `src`, if it is one."""
    base = src.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _parse(path: Path) -> ast.Module:
    return _parse_version(path, path.stat().st_mtime_ns)


@functools.cache
def _parse_version(path: Path, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _imported(src: Path, node: ast.AST, module: str, is_package: bool) -> set[str]:
    """The `jtc` modules one import statement in `module` loads."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.split(".")[0] == PACKAGE}
    if not isinstance(node, ast.ImportFrom):
        return set()
    if node.level:
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if base.split(".")[0] != PACKAGE:
        return set()
    found = {base}
    for alias in node.names:  # `from jtc import plots`: a submodule, not a name
        if module_path(src, f"{base}.{alias.name}"):
            found.add(f"{base}.{alias.name}")
    return found


def _imports_in(src: Path, nodes: Iterable[ast.AST], module: str) -> set[str]:
    path = module_path(src, module)
    is_package = path is not None and path.name == "__init__.py"
    found: set[str] = set()
    for node in nodes:
        for inner in _import_nodes(node):
            found |= _imported(src, inner, module, is_package)
    return found


@functools.cache
def _import_nodes(node: ast.AST) -> tuple[ast.AST, ...]:
    """The import statements below `node` that can run. Cached by the node itself: a tree is
    parsed once per version of its file (_parse_version), and planning asks for the imports of
    the same modules once per rule (walking every tree each time was most of a dry run's CPU)."""
    return tuple(n for n in _run_time_nodes(node) if isinstance(n, ast.Import | ast.ImportFrom))


def _type_checking_only(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`): imports for type checkers, never run."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_time_nodes(node: ast.AST) -> Iterable[ast.AST]:
    """Every node below `node` (itself included) that can run: ast.walk without the bodies of
    `if TYPE_CHECKING:` (their `else:` branches do run)."""
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        if _type_checking_only(current):
            todo += current.orelse
        else:
            todo += ast.iter_child_nodes(current)


def _with_packages(names: Iterable[str]) -> set[str]:
    """Importing jtc.a.b runs jtc/__init__.py and jtc/a/__init__.py too."""
    out = set()
    for name in names:
        parts = name.split(".")
        out |= {".".join(parts[: i + 1]) for i in range(len(parts))}
    return out


def module_closure(src: Path, names: Iterable[str]) -> set[str]:
    """Every `jtc` module that importing `names` can load, at any depth (imports inside
    functions included)."""
    todo, seen = list(_with_packages(names)), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_path(src, name)
        if path is None:
            raise ModuleNotFoundError(f"no module {name} under {src}")
        todo += _with_packages(_imports_in(src, [_parse(path)], name)) - seen
    return seen


def function_closure(src: Path, module: str, function: str) -> set[str]:
    """The `jtc` modules that calling `module.function` can load: the module's top-level
    imports, and the imports inside the function and inside the module's functions it names."""
    return module_closure(src, function_imports(src, module, function)) | _with_packages([module])


def function_imports(src: Path, module: str, function: str) -> set[str]:
    """The `jtc` modules that `module.function` imports itself (not what they import): the
    module's top-level imports, and the imports inside the function and inside the module's
    functions it names."""
    path = module_path(src, module)
    if path is None:
        raise ModuleNotFoundError(f"no module {module} under {src}")
    tree = _parse(path)
    defined = {
        n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    if function not in defined:
        raise AttributeError(f"{module} defines no function {function}")
    top = [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    reached, todo = set(), [function]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        called = {n.id for n in ast.walk(defined[name]) if isinstance(n, ast.Name)}
        todo += [c for c in called if c in defined]
    nodes = top + [defined[name] for name in reached]
    # the module itself counts (function_closure), but not the imports of its other functions
    return _imports_in(src, nodes, module) - {module}


def script_closure(src: Path, script: Path) -> set[str]:
    """The `jtc` modules a workflow script can load: for `from jtc.x import f` with f a
    function of jtc.x, what calling f can load; for any other import, the module's closure."""
    modules: set[str] = set()
    for node in ast.walk(_parse(script)):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                if module_path(src, f"{node.module}.{alias.name}"):
                    modules |= module_closure(src, [f"{node.module}.{alias.name}"])
                else:
                    modules |= _name_closure(src, node.module, alias.name)
        else:
            modules |= module_closure(src, _imported(src, node, "__main__", False))
    return modules


def _name_closure(src: Path, module: str, name: str) -> set[str]:
    try:
        return function_closure(src, module, name)
    except AttributeError:  # a class or constant: the whole module
        return module_closure(src, [module])


def code_hash(src: str | Path, script: str | Path) -> str:
    """Hash of a script and of the source of every `jtc` module it can load."""
    src, script = Path(src), Path(script)
    digest = hashlib.sha256(script.read_bytes())
    for name in sorted(script_closure(src, script)):
        digest.update(name.encode() + b"\0")
        digest.update(module_path(src, name).read_bytes())  # type: ignore[union-attr]
    return digest.hexdigest()[:16]


def run_jobs_from(src: str | Path) -> None:
    """Make the jobs this process starts import jtc from the source folder `src` (first on
    PYTHONPATH), so that a job runs the code whose hash was computed from `src`."""
    rest = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(src), *([rest] if rest else [])])


def imported_source(package: ModuleType, checkout_src: str | None, links: str | Path) -> str:
    """The source folder of the imported `jtc` package (`package`), for the code hashes and for
    the jobs' PYTHONPATH (run_jobs_from).

    `checkout_src`: the checkout's src/ beside the workflow (the workflow run from its checkout,
    or as a module by its path): jtc must have been imported from there; it is returned as it
    is. None (a remote module): jtc is an installed package, whose parent folder (site-packages)
    holds other packages too, so the folder returned is `links`, holding one link `jtc` to the
    package alone: jobs put it first on PYTHONPATH without shadowing anything else, in any
    environment (a conda one included), and import the jtc that planning hashed."""
    folder = Path(package.__file__ or "").resolve().parent
    if checkout_src is not None:
        if folder != Path(checkout_src, PACKAGE).resolve():
            raise ImportError(
                f"jtc was imported from {folder}, not from this workflow's {checkout_src}: "
                "something imported another jtc before the workflow did (the including "
                "Snakefile?); import nothing of jtc there"
            )
        return checkout_src
    links = Path(links).absolute()
    link = links / PACKAGE
    if not (link.is_symlink() and link.resolve() == folder):
        links.mkdir(parents=True, exist_ok=True)
        fresh = links / f".{PACKAGE}.{os.getpid()}"
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(folder, target_is_directory=True)
        os.replace(fresh, link)
    return str(links)
