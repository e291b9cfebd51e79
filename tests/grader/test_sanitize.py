"""grader/sanitize.py: what the instructor's browser is shown; markdown judged by what it renders to."""

from __future__ import annotations

import copy
import json
import runpy
from pathlib import Path

import nbformat
import pytest

from grader.sanitize import (
    _markdown_to_html,
    clean_html,
    clean_markdown,
    render_markdown,
    sanitize,
    unsafe_markup,
)

ROOT = Path(__file__).resolve().parents[2]


SCRIPT = '<script>fetch("/api/contents/pwned.txt", {method: "PUT"})</script>'


IMG = '<img src="x" onerror="fetch(\'/api/contents\')">'


# Markdown that a regular expression over the source misreads, and the renderer does not (issue 39).
MARKDOWN_PAYLOADS = {
    "code span across a blank line": "`a\n\n<img src=x onerror=alert(1)>`",
    "unclosed double-backtick span": "``<img src=x onerror=alert(1)>",
    "indented fake fence": "    ```\n<img src=x onerror=alert(2)>\n    ```",
    "entity-encoded javascript: link": "[x](&#106;avascript:alert(1))",
    "reference-style link": "[x][1]\n\n[1]: javascript:alert(1)",
}


def test_html_keeps_formatting_and_drops_everything_that_runs_or_fetches():
    html = clean_html(f'<b>bold</b> <table><tr><td colspan="2">cell</td></tr></table>{SCRIPT}{IMG}'
                      '<a href="javascript:alert(1)">j</a><a href="https://example.org">ok</a>'
                      '<img src="data:image/png;base64,AAAA"><div style="background:url(/x)">s</div>')
    assert "<b>bold</b>" in html
    assert '<td colspan="2">cell</td>' in html
    assert "<script" not in html, html
    assert "onerror" not in html, html
    assert 'src="x"' not in html, "an image from an address would make the page fetch it"
    assert "javascript:" not in html, html
    assert 'href="https://example.org"' in html
    assert 'src="data:image/png;base64,AAAA"' in html
    assert "style=" not in html


def test_markdown_is_judged_by_what_it_renders_to_and_unsafe_markdown_is_shown_as_text():
    md = f"> a quote with {SCRIPT}\n\n`<script>` in code, $a<b$ in math, [x](javascript:alert(1))"
    cleaned, unsafe = clean_markdown(md)
    assert unsafe[:1] == ["<script>"], unsafe
    assert "a link to javascript:" in unsafe, unsafe
    assert unsafe_markup(render_markdown(cleaned)) == [], "the cleaned cell must render to nothing that runs"
    assert "> a quote with" in cleaned, "the learner's words are kept, as text"
    assert "$a<b$" in cleaned
    prose = "For $T_k > T_q$ the mask... > quoted\n\n```python\nx = '<b>'\n```\n`<img onerror=x>` [p](https://a.org)"
    assert clean_markdown(prose) == (prose, []), "markdown that renders safely must stay exactly as written"


@pytest.mark.parametrize("payload", sorted(MARKDOWN_PAYLOADS))
def test_each_markdown_payload_is_found_and_neither_layer_renders_it(payload):
    md = MARKDOWN_PAYLOADS[payload]
    assert unsafe_markup(_markdown_to_html(md)) != [], "the renderer makes live markup of it (the payload works)"
    cleaned, unsafe = clean_markdown(md)
    assert unsafe != [], "the first layer must name what it removed"
    assert unsafe_markup(_markdown_to_html(cleaned)) == [], "the cleaned cell renders live markup"
    rendered = _markdown_to_html(cleaned)
    assert "<img" not in rendered, "the grader's own note must be text, not markup"
    assert "<script" not in rendered
    assert unsafe_markup(render_markdown(md)) == [], "the second layer (the pages' own filter) renders it"


def test_output_metadata_cannot_write_attributes_into_the_page():
    from nbconvert.exporters import HTMLExporter
    from traitlets.config import Config

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("plot()")
    png = "iVBORw0KGgo="
    cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"},
                                           metadata={"image/png": {"width": "1 onerror=alert(1)", "height": 20}})]
    nb.cells = [cell]
    raw = copy.deepcopy(nb)
    found = sanitize(nb)
    assert any("output metadata that is not a size" in f and "onerror" in f for f in found), found
    assert nb.cells[0].outputs[0].metadata == {"image/png": {"height": 20}}
    config = Config()
    runpy.run_path(str(ROOT / "nbgrader_config.py"), init_globals={"get_config": lambda: config})
    page, _ = HTMLExporter(config=config).from_notebook_node(raw)  # the second layer alone
    assert "onerror" not in page.split("<body", 1)[1], "the page's own filter let the metadata through"


def test_a_graded_notebook_is_sanitised_and_the_removals_are_reported():
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"x": {"value": IMG}}}}
    answer = nbformat.v4.new_code_cell("display(HTML(...))")
    answer.outputs = [nbformat.v4.new_output("display_data", data={"text/html": SCRIPT + "<b>ok</b>", "text/plain": "<HTML>"}),
                      nbformat.v4.new_output("display_data", data={"application/javascript": "alert(1)"}),
                      nbformat.v4.new_output("display_data", data={"image/svg+xml": "<svg onload='x()'/>", "text/plain": "svg"})]
    written = nbformat.v4.new_markdown_cell(f"My answer {IMG}")
    written.metadata["nbgrader"] = {"grade_id": "why_written", "solution": True, "grade": True}
    nb.cells = [answer, written]
    found = sanitize(nb)
    outputs = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "<script" not in outputs
    assert "onerror" not in outputs
    assert unsafe_markup(_markdown_to_html(nb.cells[1].source)) == [], "the written answer still renders live markup"
    assert IMG in nb.cells[1].source, "the learner's words are kept, shown as text"
    text = nbformat.writes(nb)
    assert "widgets" not in nb.metadata
    assert "application/javascript" not in text
    assert "image/svg+xml" not in text
    assert any(f.startswith("cell 0: text/html") for f in found), found
    assert any(f.startswith("cell 0: application/javascript") for f in found), found
    assert "why_written: markdown with an onerror handler on <img>" in found, found
