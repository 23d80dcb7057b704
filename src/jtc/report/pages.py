"""Tables and jtc's Markdown as self-contained HTML pages, so that the report shows them
(Snakemake's report offers a CSV or a Markdown file only as a download)."""

from __future__ import annotations

import html
import math
import os
import re
from pathlib import Path

import pyarrow as pa

from jtc.files.io import atomic_path, write_table

STYLE = """
body { font: 13px/1.35 system-ui, sans-serif; margin: 12px; color: #222; }
h1 { font-size: 15px; }
table { border-collapse: collapse; }
th { position: sticky; top: 0; background: #eef2f6; text-align: left; }
th, td { border: 1px solid #d6dde4; padding: 2px 8px; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafbfc; }
"""


def _cell(value) -> tuple[str, bool]:
    """(text, numeric) of one value: floats to 4 significant digits, NaN and None as '–'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–", True
    if isinstance(value, bool):
        return str(value), False
    if isinstance(value, float):
        return f"{value:.4g}", True
    if isinstance(value, int):
        return str(value), True
    return html.escape(str(value)), False


def table_page(table: pa.Table, title: str) -> str:
    """A whole HTML page holding `table` with a sticky header row."""
    head = "".join(f"<th>{html.escape(name)}</th>" for name in table.column_names)
    rows = []
    for row in table.to_pylist():
        cells = []
        for value in row.values():
            text, numeric = _cell(value)
            cells.append(f'<td class="num">{text}</td>' if numeric else f"<td>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{table.num_rows} rows</p><table><thead><tr>{head}</tr></thead><tbody>"
        + "\n".join(rows)
        + "</tbody></table></body></html>\n"
    )


def write_table_with_page(table: pa.Table, path: str | os.PathLike) -> None:
    """Write a table the report shows: Parquet (jtc.files.io.write_table), a CSV copy and an
    HTML page of it (.csv, .html beside it), each atomically."""
    write_table(table, path, csv=True)
    with atomic_path(Path(path).with_suffix(".html")) as tmp:
        tmp.write_text(table_page(table, Path(path).stem.replace("_", " ")))


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row (an escaped pipe, \\|, stays in its cell)."""
    inner = line.strip().removeprefix("|").removesuffix("|")
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def markdown_page(text: str, title: str) -> str:
    """A whole HTML page of the Markdown jtc writes (headings, paragraphs, pipe tables)."""
    out, table = [], []

    def close_table() -> None:
        if table:
            head, *body = table
            out.append("<table><thead><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr>")
            out.append("</thead><tbody>")
            out.extend("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in body)
            out.append("</tbody></table>")
            table.clear()

    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            cells = [html.escape(c) for c in _cells(line)]
            if not all(set(c) <= set("-: ") for c in cells):  # not the |---| separator
                table.append(cells)
            continue
        close_table()
        level = len(line) - len(line.lstrip("#"))
        if 1 <= level <= 3 and line[level : level + 1] == " ":
            out.append(f"<h{level + 1}>{html.escape(line[level + 1 :])}</h{level + 1}>")
        elif line.strip():
            out.append(f"<p>{html.escape(line.strip())}</p>")
    close_table()
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>" + "\n".join(out) + "</body></html>\n"
    )
