"""docs/design.md names what the code has: every package and top-level module of src/jtc in its
repository layout, every rule file's rules in its list of families, every rule with outputs in
its shape, every shared rule file; and nothing that is gone."""

import re
from pathlib import Path

from jtc.pipeline.rule_reads import WORKFLOW, read_workflow

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
SRC = ROOT / "src" / "jtc"


def section(title: str) -> str:
    """The text of a `## title` section."""
    text = DESIGN.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def first_block(text: str) -> str:
    """The first fenced block of a text."""
    start = text.index("```\n") + 4
    return text[start : text.index("```", start)]


def layout_of_src() -> tuple[set[str], set[str]]:
    """(packages, top-level modules) the layout names under src/jtc/: `name/` and `name.py`."""
    block = first_block(section("Repository layout"))
    under = block[block.index("src/jtc/") + len("src/jtc/") : block.index("tests/")]
    packages = set(re.findall(r"^  (\w+)/", under, re.M))
    return packages, set(re.findall(r"\b(\w+)\.py\b", under))


def families() -> dict[str, set[str]]:
    """{family: its rules} of the list of families: `family` (rule, rule, ...)."""
    text = " ".join(section("From a rule to its code, in one hop").split())
    listed = text[text.index("**Families**") : text.index("What the families share")]
    return {
        family: {rule.strip() for rule in rules.split(",")}
        for family, rules in re.findall(r"`(\w+)` \(([\w, ]+)\)", listed)
    }


def rules_by_file() -> dict[str, set[str]]:
    """{rule file (relative to workflow/): the rules it defines}, every file the Snakefile
    includes, with or without rules."""
    files: dict[str, set[str]] = {
        str(p.relative_to(WORKFLOW)): set() for p in (WORKFLOW / "rules").rglob("*.smk")
    }
    for rule in read_workflow().rules.values():
        files.setdefault(rule.file, set()).add(rule.name)
    return files


def test_the_layout_names_every_package_and_module_of_src_jtc():
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    assert layout_of_src() == (packages, modules)


def test_the_families_are_the_rule_files_and_their_rules():
    files = rules_by_file()
    with_rules = {
        Path(name).stem: rules
        for name, rules in files.items()
        if rules and name.startswith("rules/")
    }
    assert families() == with_rules


def test_every_rule_file_without_rules_is_named():
    """The files the families share, and each family's input functions (inputs/<family>)."""
    text, listed = DESIGN.read_text(), families()
    for name, rules in rules_by_file().items():
        if rules or not name.startswith("rules/"):
            continue
        relative = name.removeprefix("rules/")
        family_inputs = relative.startswith("inputs/") and Path(relative).stem in listed
        assert family_inputs or f"`{relative}`" in text, relative


def test_the_rules_of_the_snakefile_are_named():
    text = DESIGN.read_text()
    for rule in rules_by_file()["Snakefile"]:
        assert f"rule {rule}" in text, rule


def test_the_shape_names_every_rule_with_outputs_and_no_other():
    block = first_block(section("Shape"))
    rules = read_workflow().rules
    named = set(re.findall(r"\b[a-z0-9]+(?:_[a-z0-9]+)+\b", block)) | (
        set(re.findall(r"\b[a-z]+\b", block)) & set(rules)
    )
    with_outputs = {name for name, rule in rules.items() if rule.has_output}
    targets = {name for name, rule in rules.items() if not rule.has_output}
    assert with_outputs <= named, sorted(with_outputs - named)
    assert named <= set(rules), sorted(named - set(rules))
    assert named - with_outputs <= targets
