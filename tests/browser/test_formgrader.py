"""The instructor's browser is safe: a submission's scripts never run in the Formgrader or its feedback.

A submission whose answer displays `<script>` and `<img onerror>` HTML (and whose written answer
holds the same) is autograded as `make autograde` does, then opened in the Formgrader of a
JupyterLab started as `make formgrader` starts it, in headless Chromium. The page must render the
submission, make no request to the server's contents API, and leave the course folder as it was.
"""

from __future__ import annotations

import time

import nbformat
import pytest

from grader import autograde as ag
from grader import sandbox, verdicts
from tests.browser.test_jupyterlab import ROOT, _jupyterlab
from tests.grading import submissions as subs

LESSON = "00_setup"
STUDENT = "mallory"


@pytest.fixture
def graded_course(tmp_path, browser_path):
    import shutil

    course = tmp_path / "graded-course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    (course / "course_lib").symlink_to(ROOT / "course_lib")
    shutil.copytree(ROOT / "solutions" / LESSON, course / "solutions" / LESSON)
    shutil.copytree(ROOT / verdicts.STORED / LESSON, course / verdicts.STORED / LESSON)
    assert ag.nbgrader(course, "generate_assignment", LESSON, "--force").returncode == 0
    student = nbformat.read(course / "notebooks" / LESSON / f"{LESSON}.ipynb", as_version=4)
    sources, _ = subs.GRADING_ATTACKS["xss"]
    subs.write(subs.with_sources(student, sources), course / "submitted" / STUDENT / LESSON / f"{LESSON}.ipynb")
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


def test_a_submissions_script_does_not_run_in_the_formgrader(graded_course, browser_path, tmp_path):
    from playwright.sync_api import sync_playwright

    before = sorted(p.name for p in graded_course.rglob("*"))
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
            page.goto(f"{base}/formgrader/submissions/{notebook_id}/?index=0")
            page.wait_for_load_state("networkidle")
            time.sleep(2)
            text = page.inner_text("body")
            assert "stable_softmax" in text, f"the Formgrader did not show the submission: {text[:500]}"
            assert "My answer." in text, "the written answer is not shown"
            contents = [r for r in requests if "/api/contents" in r or "pwned" in r]
            assert contents == [], f"the submission's code made requests from the instructor's page: {contents}"
            assert dialogs == []
            assert _live_markup(page) == [], "the Formgrader's page holds a handler or a script link"
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
