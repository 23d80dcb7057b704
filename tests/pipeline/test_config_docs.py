"""config/README.md's key tables are generated from the config schema (jtc.pipeline.config_docs):
a default, a description or a key changed in the schema and not in the README fails here."""

import yaml

from jtc.pipeline.config_docs import README, TABLE_NAMES, generated, main, value
from jtc.settings import SCHEMA


def test_the_readmes_key_tables_are_the_schemas():
    assert generated() == README.read_text(), "run: python -m jtc.pipeline.config_docs"
    assert main(["--check"]) == 0


def test_every_block_of_the_schema_has_a_table_or_rows_in_the_top_level_one():
    schema = yaml.safe_load(SCHEMA.read_text())
    text, tables = README.read_text(), set(TABLE_NAMES.findall(README.read_text()))
    for key, spec in schema["properties"].items():
        if key in tables:
            continue
        children = spec.get("properties", {}) if spec.get("type") == "object" else {}
        for name in [f"{key}.{child}" for child in children] or [key]:
            assert f"| `{name}` |" in text, name


def test_values_are_written_as_the_readme_writes_them():
    assert [value(v) for v in (None, True, 3e-05, 0.25, 9000, [1, 5], "auto")] == [
        "`null`",
        "`true`",
        "0.00003",
        "0.25",
        "9000",
        "`[1, 5]`",
        "`auto`",
    ]
