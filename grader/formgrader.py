"""The Formgrader as the course serves it: nbgrader's, with a Content-Security-Policy on the pages
that show a submission (the second, independent layer of grader/sanitize.py).

`make formgrader` loads this server extension (tools/instructor-jupyter/) instead of nbgrader's
own. Every route is nbgrader's; two handlers differ:

- a submission's page runs only what the formgrade template runs (its inline scripts and
  handlers by hash, its script files by address, found by rendering the same template for a
  notebook with no cells), and may talk only to its own server: manual grading works, a script
  the renderer let through does not run;
- a file of a submission (`/formgrader/submissions/<id>/<path>`: an image the notebook shows, or
  an `.html` or `.svg` file the learner handed in) is served sandboxed, in an origin of its own
  with no script at all, as Jupyter serves the files of its own file browser.
"""

from __future__ import annotations

import copy

import nbformat
from jupyter_server.utils import url_path_join
from nbgrader.server_extensions.formgrader import apihandlers, handlers
from nbgrader.server_extensions.formgrader.formgrader import FormgradeExtension
from tornado import web

from grader.sanitize import content_security_policy

#: What a file of a submission may do in the instructor's browser: show itself, nothing else.
SANDBOXED_FILE = "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"


class _PolicedExporter:
    """The Formgrader's exporter, which also sends the policy of the page it renders."""

    def __init__(self, exporter, handler: web.RequestHandler):
        self._exporter, self._handler = exporter, handler

    def from_filename(self, filename: str, resources: dict) -> tuple[str, dict]:
        template_page, _ = self._exporter.from_notebook_node(nbformat.v4.new_notebook(), resources=copy.deepcopy(resources))
        origin = f"{self._handler.request.protocol}://{self._handler.request.host}"
        self._handler.set_header("Content-Security-Policy", content_security_policy(template_page, origin=origin))
        return self._exporter.from_filename(filename, resources=resources)


class SubmissionPage(handlers.SubmissionHandler):
    """A submission, rendered for manual grading, under the policy of its template."""

    @property
    def content_security_policy(self) -> str:  # until the page is rendered (redirects, 404, errors)
        return f"{super().content_security_policy}; default-src 'none'; style-src 'self' 'unsafe-inline'"

    @property
    def exporter(self):
        return _PolicedExporter(super().exporter, self)


class SubmissionFiles(handlers.SubmissionFilesHandler):
    """A file from a submission's folder, served with no script and no access to the server."""

    @property
    def content_security_policy(self) -> str:
        return f"{super().content_security_policy}; {SANDBOXED_FILE}"


#: nbgrader's handler -> the course's.
REPLACED = {handlers.SubmissionHandler: SubmissionPage, handlers.SubmissionFilesHandler: SubmissionFiles}


def routes(base_url: str) -> list[tuple]:
    """Every route of nbgrader's Formgrader (as its `FormgradeExtension.init_handlers` adds them),
    with the course's handlers in place of `REPLACED`."""
    rules = [*handlers.default_handlers, *apihandlers.default_handlers,
             (r"/formgrader/static/(.*)", web.StaticFileHandler, {"path": handlers.static_path}),
             (r"/formgrader/.*", handlers.Template404)]
    return [(url_path_join(base_url, pattern.lstrip("/")), REPLACED.get(handler, handler), *rest)
            for pattern, handler, *rest in rules]


class CourseFormgrader(FormgradeExtension):
    def init_handlers(self, webapp) -> None:
        webapp.add_handlers(".*$", routes(webapp.settings["base_url"]))


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": "grader.formgrader"}]


def _load_jupyter_server_extension(serverapp) -> None:
    """As nbgrader's `load_jupyter_server_extension`, with `CourseFormgrader`."""
    serverapp.log.info("Loading the course's Formgrader (nbgrader's, with a policy on submission pages)")
    formgrader = CourseFormgrader(parent=serverapp)
    formgrader.root_dir = serverapp.root_dir
    formgrader.log = serverapp.log
    formgrader.initialize([])
    formgrader.init_tornado_settings(serverapp.web_app)
    formgrader.init_handlers(serverapp.web_app)
