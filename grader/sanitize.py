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
  or image targets with a script scheme or an address the page would fetch are neutralised;
  text without any HTML tag is left exactly as written.

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


# Markdown: fenced blocks, inline code spans and math are kept as they are (the renderer escapes them).
CODE = re.compile(r"(^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\2[^\n]*$|(`+)(?!`).+?(?<!`)\3(?!`)|\$\$.+?\$\$|(?<!\\)\$[^$\n]+?\$)",
                  re.M | re.S)
TAG = re.compile(r"<[A-Za-z!?/]")
BLOCKQUOTE = re.compile(r"^(\s*)&gt;", re.M)
MD_LINK = re.compile(r"(!?)\[([^\]]*)\]\(\s*<?([^)\s>]*)>?([^)]*)\)")


def _clean_markdown_text(text: str) -> str:
    def link(match: re.Match) -> str:
        bang, label, target, rest = match.groups()
        safe = SAFE_IMAGE.match(target) if bang else SAFE_LINK.match(target)
        return f"{bang}[{label}]({target if safe else '#removed-by-the-grader'}{rest})"

    text = MD_LINK.sub(link, text)
    if not TAG.search(text):  # no HTML at all: leave the text exactly as written
        return text
    return BLOCKQUOTE.sub(r"\1>", clean_html(text))  # markdown's quote markers are not HTML


def clean_markdown(source: str) -> str:
    """A markdown cell's source with the HTML in its text sanitised and its code left alone."""
    parts, last = [], 0
    for match in CODE.finditer(source):
        parts += [_clean_markdown_text(source[last:match.start()]), match.group(0)]
        last = match.end()
    parts.append(_clean_markdown_text(source[last:]))
    return "".join(parts)


RUNS_CODE = re.compile(r"<\s*(script|iframe|object|embed|svg|style|link|meta|base|form)\b|<[^>]*\son[a-z]+\s*=|javascript:",
                       re.I)


def clean_output(output: dict) -> list[str]:
    """Clean one output in place; returns what it removed that could run ('text/html with
    <script>', 'application/javascript', ...)."""
    data = output.get("data")
    if not isinstance(data, dict):
        return []
    dropped = [key for key in data if key in DROPPED_OUTPUTS or "javascript" in key]
    found = [key for key in dropped if "widget" not in key]
    for key in ("text/html", "text/markdown"):
        text = data.get(key)
        text = text if isinstance(text, str) else "".join(text or [])
        if key in data and RUNS_CODE.search(text):
            found.append(f"{key} with {RUNS_CODE.search(text).group(0).strip()}")
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
    return found


def sanitize(nb: nbformat.NotebookNode) -> list[str]:
    """Clean a notebook in place (see the module's docstring); returns what could have run, as
    'cell N: what' (markdown that only changes in its escaping is not reported)."""
    nb.metadata.pop("widgets", None)
    found = []
    for index, cell in enumerate(nb.cells):
        label = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index}"
        if cell.cell_type == "markdown":
            if RUNS_CODE.search(cell.source):
                found.append(f"{label}: markdown with {RUNS_CODE.search(cell.source).group(0).strip()}")
            cell.source = clean_markdown(cell.source)
            cell.pop("attachments", None)
        elif cell.cell_type == "code":
            for output in cell.get("outputs", []):
                found += [f"{label}: {what}" for what in clean_output(output)]
        elif cell.cell_type == "raw":
            if RUNS_CODE.search(cell.source):
                found.append(f"{label}: raw cell with {RUNS_CODE.search(cell.source).group(0).strip()}")
            cell.source = clean_html(cell.source)
    return found


def sanitize_file(path) -> list[str]:
    """Clean a notebook file in place; returns what could have run (see `sanitize`)."""
    nb = nbformat.read(path, as_version=4)
    found = sanitize(nb)
    nbformat.write(nb, path)
    return found
