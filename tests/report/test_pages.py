"""Tables and Markdown as the report's HTML pages."""

import math
import re

import pyarrow as pa

from jtc.files.io import write_table
from jtc.report.pages import markdown_page, table_page, write_table_with_page


def test_a_table_page_holds_every_value(tmp_path):
    table = pa.table({"method": ["mat", "<id>"], "layer": [3, 4], "r2": [0.123456789, math.nan]})
    page = table_page(table, "r2")
    assert "<th>method</th><th>layer</th><th>r2</th>" in page
    assert '<td>mat</td><td class="num">3</td><td class="num">0.1235</td>' in page
    assert "<td>&lt;id&gt;</td>" in page and '<td class="num">–</td>' in page  # escaped; NaN
    write_table_with_page(table, tmp_path / "r2.parquet")  # a CSV and a page beside it
    assert (tmp_path / "r2.csv").exists() and (tmp_path / "r2.html").read_text() == page
    write_table(table, tmp_path / "t.parquet", csv=True)  # a CSV alone
    assert (tmp_path / "t.csv").exists() and not (tmp_path / "t.html").exists()


def test_a_markdown_page_has_the_headings_paragraphs_and_tables():
    text = "\n".join(
        [
            "# m on c",
            "Top-5 (probability in brackets).",
            "## Sentence 3",
            "| prediction | 1 | 2 |",
            "|---|---|---|",
            "| model, layer 2 | a \\| b (0.5) | <c> (0.1) |",
            "",
            "after",
        ]
    )
    page = markdown_page(text, "t")
    assert "<h2>m on c</h2>" in page and "<h3>Sentence 3</h3>" in page
    assert "<p>Top-5 (probability in brackets).</p>" in page and "<p>after</p>" in page
    assert "<th>prediction</th><th>1</th><th>2</th>" in page
    assert "<td>a | b (0.5)</td><td>&lt;c&gt; (0.1)</td>" in page
    assert len(re.findall("<tr>", page)) == 2  # the header and one row; no separator row
