"""config/README.md's key tables, generated from the config schema
(src/jtc/pipeline/config.schema.yaml)
so that no default or description is written twice: each key's default (and the default
experiment's value, config/config.yaml, where it differs), the values it takes, what it means
(its `description`) and what reruns when it changes: the rules whose jobs rerun, read off the
workflow (jtc.pipeline.reruns: the keys each rule's params read, and the jobs after them), after
the key's `reruns` note where it has one (a documentation keyword that validation ignores,
saying what the key adds to or removes from the plan; it names no rule). The blocks of named
entries (corpora, models) have notes only.

A table stands between `<!-- keys BLOCK -->` and `<!-- end keys -->` in the README: `.` for the
top-level keys (a mapping without a table of its own, such as `sizes`, as dotted keys),
`training` for the trained methods' blocks (a default column per kind of block), any other
block by its name (`corpora`, `models`: the keys of one entry).

    python -m jtc.pipeline.config_docs          # rewrite the tables in config/README.md
    python -m jtc.pipeline.config_docs --check  # exit 1 if they differ (test_config_docs.py)
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from jtc.files.io import write_or_check
from jtc.pipeline.config import load_schema
from jtc.pipeline.reruns import Reruns, node_of, reruns
from jtc.settings import resolved

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "config" / "README.md"
DEFAULT_CONFIG = ROOT / "config" / "config.yaml"
TABLE = re.compile(r"(<!-- keys (\S+) -->\n).*?(<!-- end keys -->)", re.S)
TABLE_NAMES = re.compile(r"<!-- keys (\S+) -->")
# a reruns cell lists at most this many rules, else the first ones and how many follow
LISTED = 12


def value(v: Any) -> str:
    """A value as the README writes it: YAML's spelling, in code type but for numbers."""
    if isinstance(v, bool) or v is None:
        return f"`{yaml.safe_dump(v).split(chr(10))[0]}`"
    if isinstance(v, float):
        text = repr(v)
        return f"{v:.10f}".rstrip("0") if "e" in text else text
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "`[" + ", ".join(str(x) for x in v) + "]`"
    return f"`{v}`"


def _bounds(spec: Mapping[str, Any]) -> str:
    parts = [
        f"{sign} {value(spec[key])}"
        for key, sign in (
            ("minimum", "≥"),
            ("exclusiveMinimum", ">"),
            ("maximum", "≤"),
            ("exclusiveMaximum", "<"),
        )
        if key in spec
    ]
    return " " + ", ".join(parts) if parts else ""


def allowed(spec: Mapping[str, Any]) -> str:
    """The values a key takes, in words: "integer ≥ 1", "`a` or `b`", "list of ..."."""
    if "enum" in spec:
        names = [value(v) for v in spec["enum"]]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
    if "anyOf" in spec:
        return " or ".join(allowed(option) for option in spec["anyOf"])
    kinds = spec.get("type", "any")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    words = []
    for kind in kinds:
        if kind == "array":
            words.append(f"list of {allowed(spec.get('items', {}))}")
        elif kind in ("integer", "number"):
            words.append(kind + _bounds(spec))
        elif kind == "null":
            words.append("`null`")
        elif kind == "boolean":
            words.append("`true` or `false`")
        else:
            words.append("text" if kind == "string" else kind)
    return " or ".join(words)


def _text(spec: Mapping[str, Any], key: str) -> str:
    return " ".join(str(spec.get(key, "")).split()).replace("|", "\\|")


def _rules(nodes: tuple[str, ...]) -> list[str]:
    """Jobs named by rule, in their order: `extract_hidden`, or `extract_hidden` (train) where
    only one split's jobs are among them."""
    splits: dict[str, list[str]] = {}
    for node in nodes:
        rule, split = node_of(node)
        splits.setdefault(rule, []).append(split or "")
    names = []
    for rule, among in splits.items():
        one = len(among) == 1 and among[0]
        names.append(f"`{rule}` ({among[0]})" if one else f"`{rule}`")
    return names


def _jobs(nodes: tuple[str, ...], first: tuple[str, ...]) -> str:
    names = _rules(nodes)
    if len(names) <= LISTED:
        return ", ".join(names)
    starts = _rules(first)
    them = "them" if len(starts) > 1 else "it"
    return f"{', '.join(starts)} and every rule after {them} ({len(names)} rules)"


def reruns_text(key: str, note: str | None, what: Reruns) -> str:
    """A key's reruns cell: its note, then the rules that rerun, then those that rerun where a
    value computed from the key changes (the largest of a list, whether a model is pruned)."""
    if note and "`" in note:
        raise ValueError(f"config key {key}: its reruns note names rules; they are generated")
    parts = [note] if note else []
    if what.whole:
        parts.append(_jobs(what.whole, what.first))
    if what.partial:
        parts.append(
            f"where a value computed from it changes, {_jobs(what.partial, what.partial_first)}"
        )
    if not parts:
        raise ValueError(f"config key {key}: no rule's params read it and it has no reruns note")
    return "; ".join(parts)


def _rows(node: Mapping[str, Any], schema: Mapping, own: set[str]) -> Iterator[tuple[str, dict]]:
    """(key, its spec) of a block's keys, a sub-block's (pruning.benchmarks) as dotted keys; at
    the top level a mapping without its own table as dotted keys, and the blocks with their own
    tables left out."""
    for key, raw in node["properties"].items():
        spec = resolved(raw, schema)
        if node is not schema and spec.get("type") == "object" and "properties" in spec:
            for sub, sub_spec in spec["properties"].items():  # a sub-block: dotted keys
                yield f"{key}.{sub}", resolved(sub_spec, schema)
        elif node is not schema:
            yield key, spec
        elif key in own:
            continue
        elif spec.get("type") == "object" and "properties" in spec:
            for sub, sub_spec in spec["properties"].items():
                yield f"{key}.{sub}", resolved(sub_spec, schema)
        else:
            yield key, spec


def _experiment(config: Mapping[str, Any], block: str, key: str) -> Any:
    """The default experiment's value of a key (None where it leaves the key unset)."""
    node: Any = config if block == "." else config.get(block, {})
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def block_table(block: str, schema: Mapping, own: set[str], config: Mapping[str, Any]) -> str:
    """A block's table: key, default, values, meaning, and what reruns (for a block of named
    entries, where noted)."""
    node = schema if block == "." else resolved(schema["properties"][block], schema)
    named = "properties" not in node  # corpora, models: the keys of one named entry
    if named:
        node = resolved(node["additionalProperties"], schema)
    rows = list(_rows(node, schema, own))
    notes = any("reruns" in spec for _, spec in rows)
    head = ["key", "default", "values", "meaning"] + (["reruns"] if notes or not named else [])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key, spec in rows:
        if "default" in spec:
            default = value(spec["default"])
        else:
            default = "required" if key in node.get("required", ()) else "none"
        used = None if named else _experiment(config, block, key)
        if used is not None and used != spec.get("default"):
            default += f" (`config/config.yaml`: {value(used)})"
        cells = [f"`{key}`", default, allowed(spec), _text(spec, "description")]
        if not named:
            dotted = key if block == "." else f"{block}.{key}"
            note = _text(spec, "reruns") or None
            cells.append(reruns_text(dotted, note, reruns(dotted)).replace("|", "\\|"))
        elif notes:
            cells.append(_text(spec, "reruns"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def methods_table(block: str, schema: Mapping) -> str:
    """A block of per-method blocks (training): a default column per kind of block (the methods
    sharing a definition), "–" where a kind has no such key."""
    node = resolved(schema["properties"][block], schema)
    kinds: dict[str, list[str]] = {}
    for method, raw in node["properties"].items():
        kinds.setdefault(raw.get("$ref", method), []).append(method)
    specs = [resolved(node["properties"][ms[0]], schema)["properties"] for ms in kinds.values()]
    keys = list(dict.fromkeys(key for props in specs for key in props))
    head = ["key", *(", ".join(f"`{m}`" for m in ms) for ms in kinds.values()), "values"]
    lines = ["| " + " | ".join([*head, "meaning"]) + " |", "|" + " --- |" * (len(head) + 1)]
    for key in keys:
        found = [resolved(props[key], schema) for props in specs if key in props]
        defaults = [
            value(resolved(props[key], schema).get("default")) if key in props else "–"
            for props in specs
        ]
        cells = [f"`{key}`", *defaults, allowed(found[0]), _text(found[0], "description")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _per_method(block: str, schema: Mapping[str, Any]) -> bool:
    """Whether a block holds a block per method (training): every key of it a mapping."""
    node = schema if block == "." else resolved(schema["properties"][block], schema)
    props = node.get("properties", {}).values()
    return bool(props) and all(resolved(p, schema).get("type") == "object" for p in props)


def render(readme: str, schema: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    """The README with every key table generated anew."""
    own = set(TABLE_NAMES.findall(readme))

    def table(match: re.Match) -> str:
        block = match.group(2)
        if _per_method(block, schema):
            return match.group(1) + methods_table(block, schema) + match.group(3)
        return match.group(1) + block_table(block, schema, own, config) + match.group(3)

    return TABLE.sub(table, readme)


def generated(readme: Path = README, config: Path = DEFAULT_CONFIG) -> str:
    return render(readme.read_text(), load_schema(), yaml.safe_load(config.read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the README differs")
    args = parser.parse_args(argv)
    stale = f"{README} differs from the schema's tables: python -m jtc.pipeline.config_docs"
    return write_or_check(README, generated(), args.check, stale)


if __name__ == "__main__":
    sys.exit(main())
