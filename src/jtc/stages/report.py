"""Stages of workflow/rules/report.smk: the headline numbers of the whole run and the report's
landing page stating them."""

from __future__ import annotations


def headline_table(pairs: list[tuple], template: str, out: str, landing: str) -> None:
    """The headline table of every (model, corpus, whether the model predicts[, whether depth
    pruning ran on it]) in `pairs` (headline_sources' arguments; a pair without the fourth is
    not pruned), and the landing page: the report's `template` (its text) followed by the
    headline section."""
    from jtc.files.io import atomic_path
    from jtc.logs import ready
    from jtc.report.headline import headline_table, landing_section, read_headline_rows
    from jtc.report.pages import write_table_with_page

    ready()
    table = headline_table(read_headline_rows(pairs))
    write_table_with_page(table, out)
    text = template.rstrip("\n") + "\n\n"
    with atomic_path(landing) as tmp:
        tmp.write_text(text + landing_section(table), encoding="utf-8")
