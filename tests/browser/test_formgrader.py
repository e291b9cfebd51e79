"""The instructor's browser is safe: a submission's scripts never run in the Formgrader or its feedback.

A submission whose answer displays `<script>` and `<img onerror>` HTML (and whose written answer
holds the same), and which hands in an HTML file of its own, is autograded as `make autograde`
does, then opened in the Formgrader of a JupyterLab started as `make formgrader` starts it, in
headless Chromium. The page must render the submission, make no request to the server's contents
API, and leave the course folder as it was. Each layer holds alone: the page's policy stops
scripts put into the page after the sanitizers, and manual grading still works under it.
"""

from __future__ import annotations

import time

import nbformat
import pytest

from grader import autograde as ag
from grader import processes, reference, sandbox
from tests.browser.test_jupyterlab import ROOT, _jupyterlab
from tests.grading import submissions as subs

LESSON = "00_setup"
STUDENT = "mallory"
HANDED_IN = "notes.html"
#: Scripts a renderer might let through, each of which would mark the page and call home if it ran.
_RUN = "{1}.pwned = ({1}.pwned || []).concat('{0}'); {1}.fetch('/api/contents/pwned-by-{0}.txt', {{method: 'PUT'}})"
PAYLOADS = "".join([
    f"<script>{_RUN.format('inline-script', 'window')}</script>",
    f'<img src="x" onerror="{_RUN.format("handler", "window")}">',
    f'<svg onload="{_RUN.format("svg", "window")}"></svg>',
    f'<a id="js-link" href="javascript:{_RUN.format("link", "window")}">link</a>',
    f'<iframe srcdoc="<script>{_RUN.format("frame", "parent")}</script>"></iframe>',
    f'<script src="{HANDED_IN}"></script>',  # a script file from the submission's own folder
])


@pytest.fixture
def graded_course(tmp_path, browser_path):
    import shutil

    course = tmp_path / "graded-course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    (course / "course_lib").symlink_to(ROOT / "course_lib")
    shutil.copytree(ROOT / "solutions" / LESSON, course / "solutions" / LESSON)
    shutil.copytree(ROOT / reference.STORED / LESSON, course / reference.STORED / LESSON)
    assert processes.nbgrader(course, "generate_assignment", LESSON, "--force").returncode == 0
    student = nbformat.read(course / "notebooks" / LESSON / f"{LESSON}.ipynb", as_version=4)
    sources, _ = subs.GRADING_ATTACKS["xss"]
    subs.write(subs.with_sources(student, sources), course / "submitted" / STUDENT / LESSON / f"{LESSON}.ipynb")
    (course / "submitted" / STUDENT / LESSON / HANDED_IN).write_text(f"<h1>My notes</h1>{PAYLOADS}")
    [result] = ag.autograde(course, [LESSON], use_sandbox=sandbox.bwrap_path() is not None)
    assert result.status == "graded", result
    assert any("held HTML or scripts" in f for f in result.flags), result.flags
    return course


def _submission_notebook_id(course) -> str:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return gb.find_submission_notebook(LESSON, LESSON, STUDENT).id


def _live_markup(page) -> list[str]:
    """The submission's event handlers and script links in the page's DOM, as the browser parsed it
    (every payload of the attack fetches a 'pwned-by-...' address; the page's own handlers do not)."""
    return page.evaluate("""() => [
        ...[...document.querySelectorAll('*')].flatMap(e => [...e.attributes]
            .filter(a => a.name.startsWith('on') && a.value.includes('pwned')).map(a => `${e.tagName} ${a.name}`)),
        ...[...document.querySelectorAll('a[href]')].filter(a => /^\\s*javascript:/i.test(a.getAttribute('href')))
            .map(a => `link ${a.getAttribute('href').slice(0, 40)}`),
    ]""")


def _gradebook_score(course) -> float | None:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return gb.find_grade("stability_written", LESSON, LESSON, STUDENT).manual_score


def test_a_submissions_script_does_not_run_in_the_formgrader(graded_course, browser_path, tmp_path):
    from playwright.sync_api import sync_playwright

    before = sorted(p.name for p in graded_course.rglob("*"))
    assert (graded_course / "autograded" / STUDENT / LESSON / HANDED_IN).exists(), "the handed-in file is not served"
    notebook_id = _submission_notebook_id(graded_course)
    instructor = str(ROOT / "tools" / "instructor-jupyter")
    with _jupyterlab(tmp_path, root=graded_course, JUPYTER_CONFIG_PATH=instructor) as (base, token), \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            login = context.new_page()
            login.goto(f"{base}/lab?token={token}")  # logs in: the formgrader pages use the cookie
            login.wait_for_load_state("networkidle")
            login.close()  # JupyterLab's own file browser polls /api/contents; only the Formgrader is watched
            page = context.new_page()
            requests: list[str] = []
            dialogs: list[str] = []
            page.on("request", lambda r: requests.append(f"{r.method} {r.url}"))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            submission = f"{base}/formgrader/submissions/{notebook_id}/"
            response = page.goto(f"{submission}?index=0")
            page.wait_for_load_state("networkidle")
            time.sleep(2)
            policy = response.headers.get("content-security-policy", "")
            script_src = policy.split("script-src", 1)[-1].split(";", 1)[0]
            assert "script-src" in policy, f"the submission page has no script policy: {policy!r}"
            assert "'unsafe-inline'" not in script_src, f"the page's policy allows inline scripts: {policy!r}"
            text = page.inner_text("body")
            assert "stable_softmax" in text, f"the Formgrader did not show the submission: {text[:500]}"
            assert "My answer." in text, "the written answer is not shown"
            contents = [r for r in requests if "/api/contents" in r or "pwned" in r]
            assert contents == [], f"the submission's code made requests from the instructor's page: {contents}"
            assert dialogs == []
            assert _live_markup(page) == [], "the Formgrader's page holds a handler or a script link"

            # manual grading works under the policy: the template's scripts run and save a score
            assert page.evaluate("typeof toggle_name === 'function' && typeof Backbone === 'object'")
            page.locator("input#stability_written").fill("1.5")
            page.locator("input#stability_written").press("Tab")
            for _ in range(50):
                if _gradebook_score(graded_course) == 1.5:
                    break
                time.sleep(0.2)
            assert _gradebook_score(graded_course) == 1.5, "a manual score typed in the Formgrader was not saved"

            # the policy alone: scripts put into the page after both sanitizers do not run
            def inject(route):
                served = route.fetch()
                route.fulfill(response=served, body=served.text().replace("</body>", PAYLOADS + "</body>"))

            page.route(f"{submission}?index=0", inject)
            requests.clear()
            page.goto(f"{submission}?index=0")
            page.wait_for_load_state("networkidle")
            page.click("#js-link")
            time.sleep(1)
            assert page.evaluate("window.pwned === undefined"), page.evaluate("window.pwned")
            assert page.evaluate("typeof toggle_name === 'function'"), "the policy stopped the template's own scripts"
            assert [r for r in requests if "pwned" in r] == []
            page.unroute(f"{submission}?index=0")

            # a file the learner handed in is served sandboxed: no script, no request to the server
            response = page.goto(f"{submission}{HANDED_IN}")
            assert response.status == 200
            assert "sandbox" in response.headers.get("content-security-policy", "")
            page.click("#js-link")
            time.sleep(1)
            assert "My notes" in page.inner_text("body")
            assert page.evaluate("window.pwned === undefined"), page.evaluate("window.pwned")
            assert [r for r in requests if "pwned" in r] == []
            assert dialogs == []

            # the feedback page, as the learner (or the instructor) opens it from disk
            from grader import feedback

            written, failed = feedback.generate_feedback(graded_course, [LESSON])
            assert failed == [], failed
            assert written == [f"{LESSON}/{STUDENT}"], written
            page.goto((graded_course / "feedback" / STUDENT / LESSON / f"{LESSON}.html").as_uri())
            page.wait_for_load_state("load")
            time.sleep(1)
            assert "My answer." in page.inner_text("body")
            assert [r for r in requests if "pwned" in r] == []
            assert dialogs == []
            assert _live_markup(page) == [], "the feedback page holds a handler or a script link"
        finally:
            browser.close()
    after = sorted(p.name for p in graded_course.rglob("*"))
    assert not [name for name in after if "pwned" in name], "a script wrote into the course folder"
    assert len(after) >= len(before)
