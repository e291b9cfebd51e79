"""A learner's first minutes, in a real browser: JupyterLab opens the released lesson 00,
"Restart Kernel and Run All Cells" runs to the end although no exercise is answered, the kernel
is the course's, and the widget renders as a widget.

It drives Debian's `chromium` (headless) with Playwright. `.ci/run` installs Chromium; on a
machine without it, or without the `playwright` package, this one test is skipped with the
reason. The lesson is copied to a temporary folder first, so JupyterLab's autosave cannot touch
notebooks/.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from course_lib.grading_env import UNWRITTEN

ROOT = Path(__file__).resolve().parents[2]
LESSON = "00_setup"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
KERNEL_DISPLAY_NAME = "LLM internals (.venv)"
DEADLINE_S = 90


def _browser() -> str:
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    pytest.skip("no Chromium on this machine: `.ci/run` installs Debian's `chromium` "
                "(apt-get install chromium); install it to run the browser test")
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _user_settings(folder: Path) -> Path:
    """The test's own JupyterLab setting: every cell kept in the page (no windowing), so the
    checks see all of them. Everything else is what `make lab` gives a learner."""
    for plugin, values in {"notebook-extension/tracker": {"windowingMode": "none"}}.items():
        extension, name = plugin.split("/")
        path = folder / "@jupyterlab" / extension / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    return folder


@contextlib.contextmanager
def _jupyterlab(tmp_path: Path, root: Path | None = None, **extra_env: str) -> Iterator[tuple[str, str]]:
    """(base URL, token) of a JupyterLab on a free loopback port, serving `root` (default: a copy
    of the released lesson), as `make lab` starts it (plus `extra_env`)."""
    if root is None:
        root = tmp_path / "course"
        if not (root / LESSON).exists():
            shutil.copytree(ROOT / "notebooks" / LESSON, root / LESSON)
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(_user_settings(tmp_path / "settings")),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / f"runtime-{port}"), "OMP_NUM_THREADS": "1", **extra_env}
    log = (tmp_path / f"lab-{port}.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
         f"--port={port}", f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=1):
                    break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"JupyterLab exited: {Path(log.name).read_text()[-2000:]}")
                time.sleep(0.5)
        else:
            pytest.fail(f"JupyterLab did not start: {Path(log.name).read_text()[-2000:]}")
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture
def lab(tmp_path, browser_path):
    """The learner's JupyterLab, on the released lesson."""
    with _jupyterlab(tmp_path) as (base, token):
        yield f"{base}/lab/tree/{LESSON}/{LESSON}.ipynb?token={token}"


@contextlib.contextmanager
def _chromium_page(p, browser_path: str):
    """A 1280 × 900 page of a headless Chromium (Playwright's `p`), closed afterwards."""
    browser = p.chromium.launch(executable_path=browser_path,
                                args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
    try:
        yield browser.new_page(viewport={"width": 1280, "height": 900})
    finally:
        browser.close()


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def _page_config(base: str, token: str) -> dict:
    with urllib.request.urlopen(f"{base}/lab?token={token}", timeout=10) as response:
        html = response.read().decode()
    start = html.index('id="jupyter-config-data"')
    start = html.index(">", start) + 1
    return json.loads(html[start:html.index("</script>", start)])


def test_the_formgrader_is_for_instructors_only(tmp_path):
    """`make lab` (learners): no Formgrader page, no Nbgrader menu, no Create Assignment sidebar.
    `make formgrader` (tools/instructor-jupyter/ first on JUPYTER_CONFIG_PATH): all three."""
    hidden = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:menu"}
    with _jupyterlab(tmp_path) as (base, token):
        assert _status(f"{base}/formgrader?token={token}") == 404, (
            "a learner's JupyterLab serves /formgrader: `make setup` should disable the formgrader server extension")
        disabled = set(_page_config(base, token)["disabledExtensions"])
        assert hidden <= disabled, f"a learner's JupyterLab shows nbgrader's {sorted(hidden - disabled)}"
    instructor = str(ROOT / "tools" / "instructor-jupyter")
    with _jupyterlab(tmp_path, JUPYTER_CONFIG_PATH=instructor) as (base, token):
        assert _status(f"{base}/formgrader?token={token}") == 200, "`make formgrader` does not serve /formgrader"
        disabled = set(_page_config(base, token)["disabledExtensions"])
        assert not hidden & disabled, f"`make formgrader` still hides {sorted(hidden & disabled)}"


EXCHANGE_CONFIG = ROOT / "tools" / "exchange-jupyter"  # `make lab COURSE_EXCHANGE=DIR` puts it first


def _released(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """(a learner's course folder, an exchange, in COURSE_EXCHANGE) with lesson 00 released to it."""
    from grader import processes

    exchange, course = tmp_path / "exchange", tmp_path / "course"
    (course / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "notebooks" / LESSON, course / "notebooks" / LESSON)
    monkeypatch.setenv("COURSE_EXCHANGE", str(exchange))
    done = processes.nbgrader(course, "release_assignment", LESSON)
    assert done.returncode == 0, done.stdout
    return course, exchange


def test_with_an_exchange_learners_get_the_assignment_list_and_nothing_else(tmp_path, monkeypatch):
    """`make lab COURSE_EXCHANGE=DIR` (tools/exchange-jupyter/ first on JUPYTER_CONFIG_PATH): the
    Nbgrader menu with its Assignment List, which lists the lessons released to that exchange;
    still no Formgrader, Create Assignment or course list. Without COURSE_EXCHANGE, `make lab` is
    the plain learners' JupyterLab (the test above)."""
    course, exchange = _released(tmp_path, monkeypatch)

    def lab_command(value: str) -> str:  # the line of `make lab`'s recipe that starts JupyterLab
        shown = subprocess.run(["make", "-n", "lab", f"COURSE_EXCHANGE={value}"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout
        return next(line for line in shown.splitlines() if "/jupyter lab " in line)

    assert "JUPYTER_CONFIG_PATH" not in lab_command(""), lab_command("")
    assert lab_command(str(exchange)).startswith(f'JUPYTER_CONFIG_PATH="{EXCHANGE_CONFIG}" '), lab_command(str(exchange))

    shown = {"@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:menu"}
    hidden = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:course-list"}
    with _jupyterlab(tmp_path, root=course, JUPYTER_CONFIG_PATH=str(EXCHANGE_CONFIG)) as (base, token):
        disabled = set(_page_config(base, token)["disabledExtensions"])
        assert not shown & disabled, f"with an exchange, learners lack {sorted(shown & disabled)}"
        assert hidden <= disabled, f"with an exchange, learners see nbgrader's {sorted(hidden - disabled)}"
        assert _status(f"{base}/formgrader?token={token}") == 404
        with urllib.request.urlopen(f"{base}/assignments?course_id=llm-internals&token={token}", timeout=60) as r:
            listed = json.loads(r.read())
    assert listed["success"], listed
    assert [(a["assignment_id"], a["status"]) for a in listed["value"]] == [(LESSON, "released")], listed


def test_with_an_exchange_a_learner_fetches_and_submits_from_the_assignments_tab(tmp_path, monkeypatch,
                                                                                 browser_path):
    """Nbgrader → Assignment List (the menu's only item), Fetch, then Submit: the lesson lands in
    the learner's course folder and a submission in the exchange's inbound folder."""
    from playwright.sync_api import sync_playwright

    course, exchange = _released(tmp_path, monkeypatch)
    home = tmp_path / "home"  # the learner's nbgrader cache goes there, not into this machine's
    home.mkdir()
    with _jupyterlab(tmp_path, root=course, JUPYTER_CONFIG_PATH=str(EXCHANGE_CONFIG), HOME=str(home)) as (base, token), \
            sync_playwright() as p:
        with _chromium_page(p, browser_path) as page:
            page.goto(f"{base}/lab?token={token}")
            page.click(".lm-MenuBar-itemLabel:text-is('Nbgrader')", timeout=60_000)
            items = [t.strip() for t in page.locator(".lm-Menu-itemLabel").all_inner_texts() if t.strip()]
            assert items == ["Assignment List"], f"the learners' Nbgrader menu shows {items}"
            page.click(".lm-Menu-itemLabel:text-is('Assignment List')")
            page.click("button:has-text('Fetch')", timeout=30_000)
            page.click("button:has-text('Submit')", timeout=30_000)
            page.wait_for_selector("button:has-text('Fetch Feedback')", timeout=30_000)
    assert (course / LESSON / f"{LESSON}.ipynb").is_file(), "Fetch did not put the lesson in the course folder"
    inbound = list((exchange / "llm-internals" / "inbound").glob(f"*+{LESSON}+*/{LESSON}.ipynb"))
    assert len(inbound) == 1, f"Submit left {inbound} in the exchange"


def test_run_all_in_jupyterlab_reaches_the_end_with_unanswered_exercises(lab, browser_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        with _chromium_page(p, browser_path) as page:
            page.goto(lab)
            page.wait_for_selector(f".jp-Toolbar-kernelName:has-text('{KERNEL_DISPLAY_NAME}')",
                                   timeout=60_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']",
                                   timeout=60_000)
            page.click(".jp-Notebook")
            page.keyboard.press("Escape")
            page.click(".lm-MenuBar-itemLabel:text-is('Kernel')")
            page.click(".lm-Menu-itemLabel:text-is('Restart Kernel and Run All Cells…')")
            page.click(".jp-Dialog button:has-text('Restart')")

            code_cells = page.locator(".jp-CodeCell")
            n_cells = code_cells.count()
            prompts: list[str] = []
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline:
                prompts = [p.strip() for p in page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()]
                if len(prompts) == n_cells and all(p[1:-2].isdigit() for p in prompts):
                    break
                time.sleep(1)
            ran = sum(p[1:-2].isdigit() for p in prompts)
            assert ran == n_cells, (
                f"Run All stopped: {ran} of {n_cells} code cells ran (prompts {prompts}); a test "
                "cell without the raises-exception tag stops JupyterLab's Run All")

            for text in ("Would you like to get notified about official Jupyter news",
                         "Error fetching courses", "Create Assignment", "Formgrader"):
                assert page.get_by_text(text).count() == 0, (
                    f"JupyterLab shows {text!r}: `make setup` should switch it off "
                    "(tools/jupyterlab-overrides.json, the disabled nbgrader lists)")
            assert page.locator(".lm-MenuBar-itemLabel:text-is('Nbgrader')").count() == 0, (
                "learners see the Nbgrader menu: `make setup` should disable it (`make formgrader` is "
                "the instructors' JupyterLab)")
            kernel = page.locator(".jp-Toolbar-kernelName").inner_text().strip()
            assert kernel == KERNEL_DISPLAY_NAME, f"the notebook runs on {kernel!r}"
            assert page.locator(".widget-hslider, .jupyter-widgets.widget-slider").count() >= 1, (
                "the widget of lesson 00 did not render as a slider (the ipywidgets extension "
                "is missing from this JupyterLab)")

            errors = []
            for i in range(n_cells):
                cell = code_cells.nth(i)
                tracebacks = cell.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.stderr']")
                if tracebacks.count():
                    errors.append((i, cell.locator(".jp-InputArea-editor").inner_text()[:60],
                                   tracebacks.first.inner_text()[-300:]))
            unexpected = [e for e in errors if UNWRITTEN not in e[2]]
            assert not unexpected, f"errors other than unanswered exercises: {unexpected}"
            assert errors, "the unanswered exercises' visible tests should fail, saying they are not written yet"
            first = code_cells.nth(errors[0][0]).locator(
                ".jp-RenderedText[data-mime-type='application/vnd.jupyter.stderr']").first.inner_text().strip()
            one_line = first.startswith("This exercise (`stable_softmax`) is not written yet") and "\n" not in first
            assert one_line, f"an untouched exercise's test should fail with its stub's one line, not a traceback: {first!r}"


LONG_CELL = """import time
from tqdm.auto import tqdm  # a widget: its comm opens while the cell runs
for _ in tqdm(range(40), desc="training"):
    time.sleep(0.25)
print("finished")"""


def _kernel_states(base: str, token: str) -> list[str]:
    with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10) as response:
        return [k["execution_state"] for k in json.loads(response.read())]


def test_the_kernel_shows_busy_for_the_whole_of_a_long_cell_with_a_progress_bar(tmp_path, browser_path):
    """While a cell with a tqdm bar (a widget) runs, the status bar says Busy and the server
    reports the kernel busy. JupyterLab sends widget comms over kernel subshells by default: the
    `create_subshell_request` goes on the control channel, its reply's `idle` status reaches the
    server and the status bar, and both said Idle for the rest of a training cell.
    tools/jupyterlab-overrides.json (`commsOverSubshells: disabled`) keeps comms on the shell."""
    import nbformat
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    root = tmp_path / "long"
    root.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(LONG_CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "long.ipynb")
    with _jupyterlab(tmp_path, root=root) as (base, token), sync_playwright() as p:
        with _chromium_page(p, browser_path) as page:
            page.goto(f"{base}/lab/tree/long.ipynb?token={token}")
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
            # JupyterLab refuses to run a cell while the kernel is "initializing" (a notification
            # says so), which under load lasts after the indicator first says idle: ask again
            for _ in range(10):
                page.click(".lm-MenuBar-itemLabel:text-is('Run')")
                page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
                try:
                    page.wait_for_selector(".jp-OutputArea-output:has-text('training')", timeout=15_000)
                    break
                except PlaywrightTimeout:
                    continue
            seen = []
            while page.locator(".jp-OutputArea-output:has-text('finished')").count() == 0 and len(seen) < 60:
                bar = " ".join(page.locator(".jp-StatusBar-Widget").all_inner_texts())
                seen.append(("Busy" if "Busy" in bar else "Idle" if "Idle" in bar else bar[:40],
                             _kernel_states(base, token)))
                time.sleep(0.25)
            assert len(seen) >= 8, f"the cell ended too early to watch: {seen}"
            wrong = [(i, s) for i, s in enumerate(seen[:-1]) if s != ("Busy", ["busy"])]
            assert not wrong, (
                f"while the cell ran, {len(wrong)} of {len(seen)} samples of (status bar, server's "
                f"execution_state) were not (Busy, busy), first {wrong[:3]}: is commsOverSubshells still 'disabled' in "
                "tools/jupyterlab-overrides.json (copied by `make setup`)?")
