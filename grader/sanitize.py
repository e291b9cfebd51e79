"""No submission's script runs in the instructor's browser, or the learner's.

The Formgrader and the feedback pages render a graded notebook as HTML in the Jupyter origin,
where the instructor is logged in: a `<script>`, an `<img onerror=...>` or a `javascript:` link
in a submission would run with the instructor's session (the contents API, terminals,
nbgrader_config.py). Markdown is judged by what it renders to, never by patterns in its source
(a renderer and a regular expression disagree on code spans, fences and entities):

- `unsafe_markup(html)` names what in rendered HTML could run or fetch: a tag that runs or
  embeds (`<script>`, `<iframe>`, `<svg>`, `<form>`...), an event handler, a style with `url(`,
  a link whose scheme is not http(s), mailto or relative (entities decoded, as a browser does),
  an image that is not inline `data:image/...`;
- `clean_html(html)` keeps an allow-list of formatting tags and attributes, with nh3 (the Ammonia
  sanitizer): what it returns has none of the above.

Two independent layers use them:

1. The graded notebook is cleaned once (`sanitize`): a markdown cell (a written answer, a cell the
   learner added) is rendered with nbconvert's own renderer; if the result holds unsafe markup, the
   cell is shown as plain text instead (its words in a literal block), with a note. HTML outputs go
   through `clean_html`; markdown outputs that render unsafe become plain text; JavaScript, SVG and
   widget outputs are dropped (their plain-text form kept); output metadata keeps only numeric image
   sizes; attachments and saved widget state go.
2. Every page nbgrader renders for the course (Formgrader, feedback) sanitises what it renders:
   nbgrader_config.py turns on nbconvert's `sanitize_html` and replaces its `markdown2html`,
   `clean_html` and `get_metadata` filters with `render_markdown`, `clean_html` and
   `numeric_metadata`. Feedback pages and the Formgrader's views of a submission also carry a
   Content-Security-Policy that allows only the template's own scripts (`content_security_policy`;
   grader/feedback.py, grader/formgrader.py), and a file of a submission is served sandboxed.
"""

from __future__ import annotations

import base64
import hashlib
import html as html_lib
import re
from html.parser import HTMLParser

import nbformat
import nh3

TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "div", "dl", "dt", "em",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "q", "s",
    "samp", "small", "span", "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th",
    "thead", "tr", "u", "ul", "var", "caption", "colgroup", "col",
})
ATTRIBUTES = {
    "*": {"title", "class"},
    "a": {"href"},
    "img": {"src", "alt", "width", "height"},
    "td": {"colspan", "rowspan", "align"}, "th": {"colspan", "rowspan", "align"},
    "details": {"open"}, "ol": {"start"},
    **{f"h{n}": {"id"} for n in range(1, 7)},
}
SAFE_LINK = re.compile(r"^(https?:|mailto:|#|[^:/?#]*(?:[/?#]|$))", re.I)  # a scheme we allow, or relative
SAFE_IMAGE = re.compile(r"^data:image/(png|jpeg|gif|webp);base64,", re.I)
SIZE = re.compile(r"^\d{1,5}(\.\d+)?(px|%)?$")
#: Tags that run code, embed another document, submit, or fetch by themselves.
RUNS_OR_FETCHES = frozenset({
    "script", "iframe", "frame", "frameset", "object", "embed", "applet", "svg", "math", "style", "link",
    "meta", "base", "form", "input", "button", "textarea", "select", "template", "video", "audio",
    "source", "track", "picture", "portal", "noscript", "xmp", "plaintext", "noembed", "noframes",
})
URL_ATTRIBUTES = frozenset({"href", "src", "srcset", "action", "formaction", "background", "poster", "data",
                            "xlink:href", "ping", "lowsrc", "dynsrc", "cite", "longdesc", "manifest", "codebase"})
DROPPED_OUTPUTS = ("application/javascript", "text/javascript", "image/svg+xml",
                   "application/vnd.jupyter.widget-view+json", "application/vnd.jupyter.widget-state+json")
NOTE = "[removed by the grader: outputs that run code are not shown]"
MARKDOWN_NOTE = ("*[shown as plain text by the grader: this cell renders to markup that could run code or "
                 "fetch in a browser ({what})]*")


def _attribute_filter(tag: str, name: str, value: str) -> str | None:
    if tag == "a" and name == "href":
        return value if SAFE_LINK.match(value.strip()) else None
    if tag == "img" and name == "src":
        return value if SAFE_IMAGE.match(value.strip()) else None
    if name in ("width", "height", "colspan", "rowspan", "start"):
        return value if SIZE.match(value.strip()) else None
    return value


def clean_html(html: str) -> str:
    """`html` with only formatting left (nh3's allow-list): no tag, attribute or address that runs
    code or makes the page fetch anything."""
    html = html.decode() if isinstance(html, bytes) else str(html)
    return nh3.clean(html, tags=set(TAGS), attributes={k: set(v) for k, v in ATTRIBUTES.items()},
                     attribute_filter=_attribute_filter, url_schemes={"http", "https", "mailto", "data"},
                     strip_comments=True, link_rel="noopener noreferrer",
                     clean_content_tags={"script", "style", "template", "xmp", "noscript", "iframe", "noembed",
                                         "noframes", "object", "embed", "svg", "math"})


class _Unsafe(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def _add(self, what: str) -> None:
        if what not in self.found:
            self.found.append(what)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in RUNS_OR_FETCHES:
            self._add(f"<{tag}>")
        for name, value in attrs:
            value = (value or "").strip()
            if name.startswith("on"):
                self._add(f"an {name} handler on <{tag}>")
            elif name == "style" and re.search(r"url\s*\(|expression\s*\(|@import", value, re.I):
                self._add(f"a style that fetches, on <{tag}>")
            elif tag == "a" and name == "href":
                if not SAFE_LINK.match(value):
                    self._add(f"a link to {value.split(':', 1)[0][:20]}:")
            elif tag == "img" and name == "src":
                if not SAFE_IMAGE.match(value):
                    self._add(f"an image from {value[:40]!r}")
            elif name in URL_ATTRIBUTES:
                self._add(f"a {name} address on <{tag}>")

    handle_startendtag = handle_starttag


def unsafe_markup(html: str) -> list[str]:
    """What in rendered HTML could run code or make the page fetch something, in words ('<script>',
    'an onerror handler on <img>', 'a link to javascript:'); [] when nothing could."""
    parser = _Unsafe()
    parser.feed(html)
    parser.close()
    return parser.found


def _markdown_to_html(source: str) -> str:
    """The HTML nbconvert's renderer (mistune, as the Formgrader and feedback pages use it) makes of
    markdown, before any sanitising."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return markdown2html_mistune(source)


def render_markdown(source: str) -> str:
    """nbconvert's `markdown2html`, sanitised: the HTML a page shows for a markdown cell."""
    return clean_html(_markdown_to_html(source))


def numeric_metadata(output: dict, key: str, mimetype: str | None = None):
    """nbconvert's `get_metadata`, which templates put unquoted into `<img width=...>`: only a
    number (a size), a bool or a known word comes through."""
    from nbconvert.filters import get_metadata

    value = get_metadata(output, key, mimetype)
    if isinstance(value, bool) or (isinstance(value, (int, float)) and value >= 0):
        return value
    return value if value in ("light", "dark") else None


def _literal(text: str) -> str:
    """Markdown that shows `text` exactly, as a code block: every renderer escapes a fence's body."""
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence}text\n{text}\n{fence}"


def clean_markdown(source: str) -> tuple[str, list[str]]:
    """(the source to keep, what its rendering held that could run or fetch). Safe markdown is kept
    exactly as written; unsafe markdown becomes a note and its text in a literal block."""
    unsafe = unsafe_markup(_markdown_to_html(source))
    if not unsafe:
        return source, []
    what = html_lib.escape(", ".join(unsafe[:4])).replace("*", "&#42;").replace("_", "&#95;").replace("`", "&#96;")
    return MARKDOWN_NOTE.format(what=what) + "\n\n" + _literal(source), unsafe


def _clean_output_metadata(output: dict) -> list[str]:
    """Keep only numeric image sizes in an output's metadata; returns what was dropped that a
    template would have written into the page."""
    metadata = output.get("metadata")
    if not isinstance(metadata, dict) or not metadata:
        return []
    kept, dropped = {}, []
    for mimetype, entry in metadata.items():
        if not (mimetype.startswith("image/") and isinstance(entry, dict)):
            continue
        sizes = {k: v for k, v in entry.items() if k in ("width", "height")
                 and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0}
        dropped += [f"{mimetype} {k} {str(v)[:30]!r}" for k, v in entry.items()
                    if k in ("width", "height") and k not in sizes]
        if sizes:
            kept[mimetype] = sizes
    output["metadata"] = kept
    return [f"output metadata that is not a size ({', '.join(dropped[:2])})"] if dropped else []


def clean_output(output: dict) -> list[str]:
    """Clean one output in place; returns what it removed that could run or fetch
    ('application/javascript', 'text/html with <script>', ...)."""
    found = _clean_output_metadata(output)
    data = output.get("data")
    if not isinstance(data, dict):
        return found
    dropped = [key for key in data if key in DROPPED_OUTPUTS or "javascript" in key]
    found += [key for key in dropped if "widget" not in key]
    for key in dropped:
        del data[key]
    if "text/html" in data:
        html = data["text/html"]
        html = html if isinstance(html, str) else "".join(html)
        found += [f"text/html with {what}" for what in unsafe_markup(html)]
        data["text/html"] = clean_html(html)
    if "text/markdown" in data:
        md = data["text/markdown"]
        md = md if isinstance(md, str) else "".join(md)
        kept, unsafe = clean_markdown(md)
        if unsafe:
            found += [f"text/markdown with {what}" for what in unsafe]
            del data["text/markdown"]
            data.setdefault("text/plain", md)
    if dropped and not data:
        data["text/plain"] = NOTE
    return found


def sanitize(nb: nbformat.NotebookNode) -> list[str]:
    """Clean a notebook in place (see the module's docstring); returns what could have run or
    fetched, as 'cell N: what'."""
    nb.metadata.pop("widgets", None)
    found = []
    for index, cell in enumerate(nb.cells):
        label = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index}"
        if cell.cell_type == "markdown":
            cell.source, unsafe = clean_markdown(cell.source)
            found += [f"{label}: markdown with {what}" for what in unsafe]
            if cell.pop("attachments", None):
                found.append(f"{label}: markdown attachments")
        elif cell.cell_type == "code":
            for output in cell.get("outputs", []):
                found += [f"{label}: {what}" for what in clean_output(output)]
        elif cell.cell_type == "raw":
            found += [f"{label}: raw cell with {what}" for what in unsafe_markup(cell.source)]
            cell.source = clean_html(cell.source)
    return found


def sanitize_file(path) -> list[str]:
    """Clean a notebook file in place; returns what could have run (see `sanitize`)."""
    nb = nbformat.read(path, as_version=4)
    found = sanitize(nb)
    nbformat.write(nb, path)
    return found


# --- the second layer: a Content-Security-Policy on the pages that show a submission ---------------

_INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", re.S | re.I)
_SCRIPT_SRC = re.compile(r"<script[^>]*\bsrc=[\"']([^\"']+)[\"']", re.I)
_HANDLER = re.compile(r"""<[a-z][^>]*?\son[a-z]+\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.I)
_MATHJAX_FOLDER = re.compile(r"^(.*?/mathjax/)", re.I)  # MathJax loads its parts (any version) from there


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


NONE = "'none'"


def content_security_policy(template_page: str, *, origin: str | None = None) -> str:
    """A policy that lets a page run only what `template_page` (the same template, rendered for a
    notebook with no cells) runs: its inline scripts and event handlers by hash, its script files
    by address (MathJax by its folder); no other script, no plugin, no form, no frame.

    `origin` (e.g. `http://127.0.0.1:8888`) is for a page the Jupyter server serves: the template's
    addresses are paths there, and its scripts talk to the server (`connect-src 'self'`); only that
    server may frame it. Without it (a file opened from disk) the page may fetch nothing."""
    sources = sorted({_sha256(body) for body in _INLINE_SCRIPT.findall(template_page)})
    handlers = sorted({_sha256(html_lib.unescape(a or b)) for a, b in _HANDLER.findall(template_page)})
    if handlers:  # an inline handler runs only if its exact text is listed
        sources += ["'unsafe-hashes'", *handlers]
    for src in sorted(set(_SCRIPT_SRC.findall(template_page))):
        src = html_lib.unescape(src).split("?", 1)[0]
        if origin and src.startswith("/"):
            src = origin.rstrip("/") + src
        folder = _MATHJAX_FOLDER.match(src)
        sources.append(folder.group(1) if folder else src)
    own = "'self' " if origin else ""  # the server's own stylesheets, fonts, icons and API
    policy = [
        "default-src 'none'", f"script-src {' '.join(dict.fromkeys(sources)) or NONE}",
        f"style-src {own}'unsafe-inline' https:", f"font-src {own}https: data:", f"img-src {own}data:",
        f"connect-src {own.strip() or NONE}", "object-src 'none'", "base-uri 'none'", "form-action 'none'",
        "frame-src 'none'", *(["frame-ancestors 'self'"] if origin else []),
    ]
    return "; ".join(policy)


def add_content_security_policy(page: str, policy: str) -> str:
    """`page` with `policy` as the first element of its head (before any script)."""
    meta = f'<meta http-equiv="Content-Security-Policy" content="{html_lib.escape(policy)}">'
    head = re.search(r"<head[^>]*>", page, re.I)
    return page[:head.end()] + meta + page[head.end():] if head else meta + page
