"""No submission's script runs in the instructor's browser, or the learner's.

The Formgrader and the feedback pages render a graded notebook as HTML in the Jupyter origin,
where the instructor is logged in: a `<script>`, an `<img onerror=...>` or a JavaScript output
in a submission would run with the instructor's session (the contents API, terminals,
nbgrader_config.py). Every graded notebook is cleaned before anyone opens it:

- code outputs: HTML and markdown outputs are sanitised (a fixed list of formatting tags, no
  event handlers, no `style`, links only to http(s)/mailto/relative targets, images only from
  `data:image/...`); JavaScript, SVG (which can carry scripts) and widget views are dropped,
  with their plain-text form kept; the notebook's saved widget state goes too;
- markdown cells (written answers, cells a learner added): the HTML in their text is sanitised
  the same way, code spans and blocks are left as they are (they are shown escaped), and link
  or image targets with a script scheme or an address the page would fetch are neutralised.

A cleaned notebook makes no request to the server when it is shown, and runs nothing.
"""

from __future__ import annotations

import re

import bleach
import nbformat

TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "div", "dl", "dt", "em",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "q", "s",
    "samp", "small", "span", "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th",
    "thead", "tr", "u", "ul", "var", "caption", "colgroup", "col",
})
SAFE_LINK = re.compile(r"^(https?:|mailto:|#|[^:/?#]*(?:[/?#]|$))", re.I)  # a scheme we allow, or relative
SAFE_IMAGE = re.compile(r"^data:image/(png|jpeg|gif|webp);base64,", re.I)
DROPPED_OUTPUTS = ("application/javascript", "text/javascript", "image/svg+xml",
                   "application/vnd.jupyter.widget-view+json", "application/vnd.jupyter.widget-state+json")
NOTE = "[removed by the grader: outputs that run code are not shown]"


def _attributes(tag: str, name: str, value: str) -> bool:
    if name in ("title", "alt", "colspan", "rowspan", "align", "width", "height", "open"):
        return True
    if tag == "a" and name == "href":
        return bool(SAFE_LINK.match(value.strip()))
    if tag == "img" and name == "src":
        return bool(SAFE_IMAGE.match(value.strip()))
    return False


_cleaner = bleach.Cleaner(tags=TAGS, attributes=_attributes, protocols=["http", "https", "mailto", "data"],
                          strip=False, strip_comments=True)


def clean_html(html: str) -> str:
    """`html` with only formatting left: disallowed tags are shown as text, not run."""
    return _cleaner.clean(html)


# Markdown: fenced blocks, then inline code spans, are kept as they are.
CODE = re.compile(r"(^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\2[^\n]*$|(`+)(?!`).+?(?<!`)\3(?!`))", re.M | re.S)
MD_LINK = re.compile(r"(!?)\[([^\]]*)\]\(\s*<?([^)\s>]*)>?([^)]*)\)")


def _clean_markdown_text(text: str) -> str:
    def link(match: re.Match) -> str:
        bang, label, target, rest = match.groups()
        safe = SAFE_IMAGE.match(target) if bang else SAFE_LINK.match(target)
        return f"{bang}[{label}]({target if safe else '#removed-by-the-grader'}{rest})"

    return clean_html(MD_LINK.sub(link, text))


def clean_markdown(source: str) -> str:
    """A markdown cell's source with the HTML in its text sanitised and its code left alone."""
    parts, last = [], 0
    for match in CODE.finditer(source):
        parts += [_clean_markdown_text(source[last:match.start()]), match.group(0)]
        last = match.end()
    parts.append(_clean_markdown_text(source[last:]))
    return "".join(parts)


def clean_output(output: dict) -> None:
    data = output.get("data")
    if not isinstance(data, dict):
        return
    dropped = [key for key in data if key in DROPPED_OUTPUTS or "javascript" in key]
    for key in dropped:
        del data[key]
    if "text/html" in data:
        html = data["text/html"]
        data["text/html"] = clean_html(html if isinstance(html, str) else "".join(html))
    if "text/markdown" in data:
        md = data["text/markdown"]
        data["text/markdown"] = clean_markdown(md if isinstance(md, str) else "".join(md))
    if dropped and not data:
        data["text/plain"] = NOTE


def sanitize(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Clean a notebook in place (see the module's docstring); returns it."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = clean_markdown(cell.source)
            cell.pop("attachments", None)
        elif cell.cell_type == "code":
            for output in cell.get("outputs", []):
                clean_output(output)
        elif cell.cell_type == "raw":
            cell.source = clean_html(cell.source)
    return nb


def sanitize_file(path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.write(sanitize(nb), path)
