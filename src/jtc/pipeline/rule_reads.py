"""The config keys each rule's params read, from the workflow's own files (jtc.pipeline.reruns
turns them into what reruns when a key changes).

The Snakefile and the rule files it includes, in its order, as Snakemake's own parser compiles
them, walked with `ast`: a settings object's `.param(config)` reads the object's keys; a lookup
`config["a"]["b"]` reads a.b (indexed by the `split` wildcard, the key of the job's split; by
another expression, any key there); a function of the workflow's files reads what its body
reads. A value computed from a key (the largest of prediction.top_k, whether a model is pruned)
is a *partial* read: the rule reruns only when that value changes. A value the workflow derives
from the config while planning is read as ALIASES and DERIVED say, a library function given the
whole config as LIBRARY says; any other way of reaching the config is refused by name, so that
a new one is declared here before it can hide a rerun. Torch-free; Snakemake's parser is loaded
here only.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jtc.settings
from jtc.settings import Settings

WORKFLOW = Path(__file__).resolve().parents[3] / "workflow"

# values workflow/rules/config.smk derives from the config while planning: the block they are
# (an alias: a lookup on it reads a key of the block) ...
ALIASES = {"SUBMODULES": ("submodules",), "METHODS": ("methods",)}
# ... or the keys a value computed from them reads (partial reads)
DERIVED = {
    "MODELS": (("models",),),
    "CORPORA": (("corpora",),),
    "PREDICTING": (("models", "*", "predict"),),
    "MAP_METHODS": (("methods",),),
    "CLOSED_METHODS": (("methods",),),
    "TRAINED_METHODS": (("methods",),),
    "methods_for": (("methods",), ("models", "*", "predict")),
    "EXPERIMENT.prunes": (("pruning", "models"), ("pruning", "corpora"), ("corpora",)),
}
# library functions a rule gives the whole config, by the keys they read (and the split of the
# jobs that read them, where only one split's do)
LIBRARY = {
    "settings_param": ((("training",), None),),  # jtc.shortcuts.methods: training.<method>
    "split_positions": ((("positions_per_sentence",), "train"),),  # jtc.pipeline.config
}
# calls whose value is their argument (a read through them is whole, not partial)
SAME_VALUE = {"list", "tuple", "dict"}


class ReadError(ValueError):
    """A rule's params reach the config in a way this module does not know."""


@dataclasses.dataclass(frozen=True)
class Read:
    """A config key a rule's params read: its path (`*` any key there, `{split}` the job's
    split), whether through a value computed from it, and the split of the jobs that read it
    (None: every job of the rule)."""

    key: tuple[str, ...]
    partial: bool = False
    split: str | None = None

    def matches(self, key: tuple[str, ...], split: str | None) -> bool:
        """Whether a job of this split reads `key` (or a part of it, or a block holding it)."""
        if self.split is not None and split is not None and self.split != split:
            return False
        for mine, theirs in zip(self.key, key, strict=False):
            mine = (split or "*") if mine == "{split}" else mine
            if mine not in ("*", theirs):
                return False
        return True


# ---- the rule files, compiled ----------------------------------------------------------------


def compiled(path: Path) -> ast.Module:
    """A rule file (or the Snakefile) as the Python Snakemake's parser makes of it."""
    from snakemake import parser
    from snakemake.sourcecache import LocalSourceFile

    def source(file: Any) -> Any:
        return open(file.get_path_or_uri(secret_free=True), encoding="utf-8")

    workflow = SimpleNamespace(sourcecache=SimpleNamespace(open=source))
    code, _ = parser.parse(LocalSourceFile(str(path)), workflow, {})
    return ast.parse(code, filename=str(path))


def _decorator(node: ast.FunctionDef, name: str) -> ast.Call | None:
    for dec in node.decorator_list:
        if isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute):
            if dec.func.attr == name:
                return dec
    return None


@dataclasses.dataclass(frozen=True)
class Rule:
    name: str
    file: str  # relative to workflow/
    has_output: bool
    params: tuple[ast.keyword, ...]


@dataclasses.dataclass(frozen=True)
class Workflow:
    """The rules (in the order the files define them), the functions of the workflow's files
    and the names its files assign from the config."""

    rules: dict[str, Rule]
    functions: dict[str, ast.FunctionDef]
    derived: frozenset[str]


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a compiled file in their order, those under `if` (a rule defined only
    for some configs) and `try` included."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try)):
            yield from _statements([*node.body, *node.orelse, *getattr(node, "finalbody", [])])
            for handler in getattr(node, "handlers", []):
                yield from _statements(handler.body)


def _include(node: ast.stmt) -> str | None:
    """The file an `include:` statement names."""
    call = node.value if isinstance(node, ast.Expr) else None
    if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "include":
        return call.args[0].value  # type: ignore[attr-defined]
    return None


@functools.cache
def read_workflow(workflow: Path = WORKFLOW) -> Workflow:
    """The Snakefile and the files it includes, in its order."""
    rules: dict[str, Rule] = {}
    functions: dict[str, ast.FunctionDef] = {}
    assigned: dict[str, ast.expr] = {}

    def read(path: Path) -> None:
        for node in _statements(compiled(path).body):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        assigned[target.id] = node.value
            elif isinstance(node, ast.FunctionDef) and node.name.startswith("__rule_"):
                rule = _rule(node, str(path.relative_to(workflow)))
                rules[rule.name] = rule
            elif isinstance(node, ast.FunctionDef):
                functions[node.name] = node
            elif (included := _include(node)) is not None:
                read(path.parent / included)

    read(workflow / "Snakefile")
    return Workflow(rules, functions, _derived_names(assigned))


def _rule(node: ast.FunctionDef, file: str) -> Rule:
    head = _decorator(node, "rule")
    assert head is not None, node.name
    name = next(k.value for k in head.keywords if k.arg == "name")
    params = _decorator(node, "params")
    return Rule(
        name.value,  # type: ignore[attr-defined]
        file,
        _decorator(node, "output") is not None,
        tuple(params.keywords) if params else (),
    )


def _derived_names(assigned: dict[str, ast.expr]) -> frozenset[str]:
    """The module-level names whose value is computed from the config (directly or through
    another such name)."""
    derived = {"config"}
    changed = True
    while changed:
        changed = False
        for name, value in assigned.items():
            used = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
            if name not in derived and used & derived:
                derived.add(name)
                changed = True
    return frozenset(derived - {"config"})


# ---- what params read --------------------------------------------------------------------------


def _settings_classes() -> dict[str, type[Settings]]:
    return {
        name: cls
        for name, cls in vars(jtc.settings).items()
        if isinstance(cls, type) and issubclass(cls, Settings) and cls is not Settings
    }


def _settings_reads(cls: type[Settings], call: ast.Call) -> set[Read]:
    """The keys `cls.param(config[, method])` reads."""
    block: tuple[str, ...] = (cls.BLOCK,)
    if cls.BLOCK == "training":
        method = call.args[1] if len(call.args) > 1 else None
        literal = isinstance(method, ast.Constant) and isinstance(method.value, str)
        block += (method.value if literal else "*",)  # type: ignore[union-attr]
    elif cls.SUB_BLOCK is not None:
        block += (cls.SUB_BLOCK,)
    return {Read((*block, key)) for key in cls.keys()}


def _index(node: ast.expr) -> str:
    """A lookup's key: a literal, the split wildcard, or any key (`*`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and node.attr == "split":
        return "{split}"
    return "*"


def _lookup(node: ast.expr) -> tuple[str, tuple[str, ...]] | None:
    """(the name it starts from, its keys) of a lookup chain config["a"]["b"].get("c")."""
    keys: list[str] = []
    while True:
        if isinstance(node, ast.Subscript):
            keys.append(_index(node.slice))
            node = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
        ):
            keys.append(_index(node.args[0]))
            node = node.func.value
        elif isinstance(node, ast.Name):
            return node.id, tuple(reversed(keys))
        else:
            return None


Found = Iterator[Read]


def _marked(reads: Iterator[Read], partial: bool) -> Found:
    for read in reads:
        yield dataclasses.replace(read, partial=True) if partial else read


class _Reads:
    """The reads of the expressions of the workflow's files."""

    def __init__(self, workflow: Workflow) -> None:
        self.workflow = workflow
        self.settings = _settings_classes()
        self.done: dict[str, frozenset[Read]] = {}

    def function(self, name: str) -> frozenset[Read]:
        if name not in self.done:
            self.done[name] = frozenset()  # (a recursive function reads what it reads)
            body = self.workflow.functions[name]
            self.done[name] = frozenset(self.visit(body, f"function {name}"))
        return self.done[name]

    def visit(self, node: ast.AST, where: str, partial: bool = False) -> Found:
        """The reads of an expression (or statement); `partial`: it is an argument of a call
        that computes another value from it."""
        lookup = _lookup(node) if isinstance(node, (ast.Subscript, ast.Call)) else None
        if lookup is not None and (lookup[0] == "config" or lookup[0] in ALIASES):
            yield Read((*ALIASES.get(lookup[0], ()), *lookup[1]), partial)
            yield from self._indexes(node, where, partial)
        elif isinstance(node, ast.Call):
            yield from self._call(node, where, partial)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            dotted = f"{node.value.id}.{node.attr}"
            if dotted in DERIVED:
                yield from (Read(key, True) for key in DERIVED[dotted])
            else:
                yield from self.visit(node.value, where, partial)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            yield from _marked(self._name(node.id, where), partial)
        else:
            for child in ast.iter_child_nodes(node):
                yield from self.visit(child, where, partial)

    def _indexes(self, node: ast.AST, where: str, partial: bool) -> Found:
        """The reads of a lookup chain's indexes (a loop variable over a derived list)."""
        while isinstance(node, (ast.Subscript, ast.Call)):
            if isinstance(node, ast.Subscript):
                yield from self.visit(node.slice, where, partial)
                node = node.value
            else:
                yield from (r for arg in node.args for r in self.visit(arg, where, partial))
                node = node.func.value  # type: ignore[attr-defined]

    def _call(self, node: ast.Call, where: str, partial: bool) -> Found:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "param"
            and isinstance(func.value, ast.Name)
            and func.value.id in self.settings
        ):
            yield from _marked(_settings_reads(self.settings[func.value.id], node), partial)
            return
        name = func.id if isinstance(func, ast.Name) else None
        arguments = [*node.args, *(k.value for k in node.keywords)]
        if name in LIBRARY:
            yield from (Read(key, partial, split) for key, split in LIBRARY[name])
            arguments = [a for a in arguments if not (isinstance(a, ast.Name) and a.id == "config")]
        yield from self.visit(func, where, partial)
        # an argument is the call's value where the call only rebuilds it (list) or is the
        # workflow's own function (whose body is read itself); else a value computed from it
        through = name in SAME_VALUE or name in self.workflow.functions
        for argument in arguments:
            yield from self.visit(argument, where, partial or not through)

    def _name(self, name: str, where: str) -> Found:
        if name == "config":
            raise ReadError(
                f"{where}: the whole config is given to a function that jtc.pipeline.rule_reads "
                "does not know: add it to LIBRARY with the keys it reads"
            )
        if name in ALIASES:
            yield Read(ALIASES[name])
        elif name in DERIVED:
            yield from (Read(key, True) for key in DERIVED[name])
        elif name in self.workflow.derived:
            raise ReadError(
                f"{where}: {name} is derived from the config while planning: add it to "
                "jtc.pipeline.rule_reads.DERIVED (or ALIASES) with the keys it is computed from"
            )
        elif name in self.workflow.functions:
            yield from self.function(name)


@functools.cache
def params_read(workflow: Path = WORKFLOW) -> dict[str, frozenset[Read]]:
    """{rule: the config keys its params read}, every rule of the workflow."""
    parsed = read_workflow(workflow)
    reads = _Reads(parsed)
    return {
        rule.name: frozenset(
            read
            for param in rule.params
            for read in reads.visit(param.value, f"rule {rule.name}, params.{param.arg}")
        )
        for rule in parsed.rules.values()
    }
