"""The grader against hostile data and a slightly-off environment, without running nbgrader:
sanitised notebooks, records that are not regular files, recorded values no check can handle,
the pre-check, symlinked venvs, the memory cgroup's path, and one failing submission in a batch."""

from __future__ import annotations

import copy
import json
import os
import runpy
import shutil
import sys
import threading
from pathlib import Path

import nbformat
import pytest
import torch

from grader import autograde as ag
from grader import flags, gradebook, precheck, replay, sandbox, verdicts
from grader.sanitize import (
    _markdown_to_html,
    add_content_security_policy,
    clean_html,
    clean_markdown,
    render_markdown,
    sanitize,
    unsafe_markup,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = '<script>fetch("/api/contents/pwned.txt", {method: "PUT"})</script>'
IMG = '<img src="x" onerror="fetch(\'/api/contents\')">'


# --- what the instructor's browser is shown ----------------------------------------------------

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


# Markdown that a regular expression over the source misreads, and the renderer does not (issue 39).
MARKDOWN_PAYLOADS = {
    "code span across a blank line": "`a\n\n<img src=x onerror=alert(1)>`",
    "unclosed double-backtick span": "``<img src=x onerror=alert(1)>",
    "indented fake fence": "    ```\n<img src=x onerror=alert(2)>\n    ```",
    "entity-encoded javascript: link": "[x](&#106;avascript:alert(1))",
    "reference-style link": "[x][1]\n\n[1]: javascript:alert(1)",
}


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


def test_feedback_pages_allow_only_the_templates_own_scripts():
    from grader.feedback import feedback_policy

    policy = feedback_policy(ROOT)
    assert "default-src 'none'" in policy
    assert "object-src 'none'" in policy
    assert "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";", 1)[0], policy
    page = add_content_security_policy("<html><head><title>t</title></head><body></body></html>", policy)
    assert page.index("Content-Security-Policy") < page.index("<title>")


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


# --- records written where the learner's code could write --------------------------------------

def test_a_fifo_or_a_link_in_the_records_folder_is_refused_without_reading_it(tmp_path):
    records = tmp_path / "checks"
    records.mkdir()
    (records / "checks.jsonl").write_text("")
    os.mkfifo(records / "extra.jsonl")
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(replay.learner_records(tmp_path)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert outcome, "reading records with a FIFO among them blocked the grader"
    assert isinstance(outcome[0], str)
    assert "'extra.jsonl', which is not a regular file" in outcome[0]
    os.unlink(records / "extra.jsonl")
    (records / "checks.jsonl").unlink()
    os.mkfifo(records / "checks.jsonl")  # the file the grader reads, as a FIFO: no writer ever comes
    reader = threading.Thread(target=lambda: outcome.append(replay.learner_records(tmp_path)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert len(outcome) == 2, "a FIFO in place of the records file blocked the grader"
    assert "not a regular file" in outcome[1]


def test_records_over_the_size_bound_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_SANDBOX_RUNTIME_BYTES", "1000")
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "checks.jsonl").write_text("x" * 2000)
    assert "more than the 1,000 allowed" in replay.learner_records(tmp_path)


def test_a_recorded_value_no_check_can_handle_fails_that_check_instead_of_stopping_the_grader():
    reference = [{"cell": "a", "index": 0, "kind": "shape", "actual": torch.tensor([2, 3]), "expected": [2, 3],
                  "options": {"name": "out", "hint": None}}]
    forged = [{**reference[0], "actual": torch.tensor([-1, 3])}]  # torch.empty([-1, 3]) raises RuntimeError
    failure, _ = verdicts.compare(reference, forged)["a"]
    assert failure is not None
    assert "expected shape" in failure or "cannot be checked" in failure, failure
    odd = [{**reference[0], "actual": torch.tensor([[1.5]])}]
    assert verdicts.compare(reference, odd)["a"][0] is not None


def test_one_submission_that_makes_the_grader_itself_fail_is_zeroed_and_the_batch_goes_on(tmp_path, monkeypatch):
    """grade_submission raising (a bug, or hostile data) costs that submission only."""
    from grader import submission

    for student in ("a-breaks-the-grader", "b-next"):
        folder = tmp_path / "submitted" / student / "00_setup"
        folder.mkdir(parents=True)
        (folder / "00_setup.ipynb").write_text("{}")
    monkeypatch.setattr(precheck, "check", lambda root, use_sandbox: "ok")
    monkeypatch.setattr(ag, "course_fingerprint", lambda root: {})
    monkeypatch.setattr(verdicts, "reference_records", lambda *a, **k: {})
    monkeypatch.setattr(gradebook, "has_lesson", lambda root, lesson: True)
    monkeypatch.setattr(gradebook, "lesson_scores", lambda root, lesson, db=None: ({"b-next": 4.0}, 8.0))
    monkeypatch.setattr(gradebook, "forget", lambda root, lesson, student, db=None: None)
    (tmp_path / "notebooks" / "00_setup").mkdir(parents=True)
    (tmp_path / "notebooks" / "00_setup" / "00_setup.ipynb").write_text("{}")

    def grade(job):
        if job.student.startswith("a-"):
            raise ValueError("a tensor subclass with an odd shape")
        return "graded", 1.0, []

    monkeypatch.setattr(submission, "grade_submission", grade)
    monkeypatch.setattr(ag, "protected_names", lambda nb: {})
    results = ag.autograde(tmp_path, ["00_setup"], use_sandbox=False)
    assert [(r.student, r.status, r.auto_score) for r in results] == [
        ("a-breaks-the-grader", "grader error", 0.0), ("b-next", "graded", 4.0)]
    assert "the grader failed on this submission (ValueError: a tensor subclass with an odd shape)" in results[0].flags[0]


# --- the environment ---------------------------------------------------------------------------

def test_the_kernels_cause_of_death_is_reported_not_guessed():
    log = "[AutogradeApp | ERROR] Kernel died\nbwrap: execvp /work/other/.venv/bin/python: No such file or directory\n"
    reason = flags.failure_reason("autograde error", 600, log)
    assert "bwrap: execvp /work/other/.venv/bin/python: No such file or directory" in reason
    assert "out of memory" not in reason


def test_a_symlinked_venv_is_bound_at_its_own_path_and_at_its_target(tmp_path, monkeypatch):
    real = tmp_path / "real-venv"
    (real / "bin").mkdir(parents=True)
    link = tmp_path / "checkout" / ".venv"
    link.parent.mkdir()
    link.symlink_to(real)
    monkeypatch.setattr(sys, "prefix", str(link))
    monkeypatch.setattr(sys, "executable", str(link / "bin" / "python"))
    binds = dict((str(d), str(s)) for s, d in sandbox._read_only_binds())
    assert binds.get(str(link)) == str(real.resolve()), binds
    assert binds.get(str(real.resolve())) == str(real.resolve())


@pytest.mark.skipif(sandbox.bwrap_path() is None, reason="needs bwrap")
def test_the_precheck_passes_here_and_names_the_cause_for_a_course_without_course_lib(tmp_path):
    assert precheck.check(ROOT) == str(sandbox.COURSE_LIB_MOUNT)
    course = tmp_path / "course"  # not a course directory
    course.mkdir()
    with pytest.raises(precheck.GradingSetupError, match="has no course_lib/: point the grader at the course directory"):
        precheck.check(course)


@pytest.mark.skipif(sandbox.bwrap_path() is None, reason="needs bwrap")
def test_the_precheck_fails_loudly_when_course_lib_cannot_be_imported(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "course_lib", course / "course_lib", ignore=shutil.ignore_patterns("__pycache__", "*.pt"))
    (course / "course_lib" / "__init__.py").write_text("raise ImportError('broken on purpose')\n")
    with pytest.raises(precheck.GradingSetupError, match="broken on purpose"):
        precheck.check(course)


def test_a_cgroup_path_from_the_runtime_folder_is_trusted_only_if_it_is_ours(tmp_path):
    (tmp_path / sandbox.CGROUP_FILE).write_text("/etc")
    assert sandbox.memory_cgroup_hit(tmp_path) is None
    assert Path("/etc").exists()
    (tmp_path / sandbox.CGROUP_FILE).write_text("/sys/fs/cgroup/memory/../../../etc/llm-grading-1")
    assert sandbox.memory_cgroup_hit(tmp_path) is None


@pytest.mark.skipif(os.geteuid() != 0 or sandbox._own_memory_cgroup() is None, reason="needs root and a memory cgroup")
def test_the_memory_cgroup_bounds_the_whole_tree_and_is_removed(tmp_path):
    import subprocess

    runtime = sandbox.runtime_dir(tmp_path / "runtime")
    code = ("import os, sys; sys.path.insert(0, {root!r}); from grader import sandbox; from pathlib import Path; "
            "g = sandbox.enter_memory_cgroup(Path({runtime!r})); print(g)").format(root=str(ROOT), runtime=str(runtime))
    env = {**os.environ, "LLM_SANDBOX_TREE_MEMORY_BYTES": str(256 * 2**20)}
    done = subprocess.run([sys.executable, "-c", code + "; x = bytearray(600 * 2**20)"], env=env,
                          capture_output=True, text=True, check=False)
    first = (done.stdout.strip().splitlines() or ["None"])[0]
    if first == "None":
        pytest.skip(f"no memory cgroup can be made here (a cgroup v2 tree that does not delegate memory?): {done.stderr[-200:]}")
    group = Path(first)
    assert group.name.startswith(sandbox.CGROUP_PREFIX), done.stdout + done.stderr
    assert done.returncode != 0, "600 MiB in a 256 MiB cgroup should have been killed"
    assert sandbox.memory_cgroup_hit(runtime) is True
    assert not group.exists(), "the grader removes the cgroup it read"


def test_records_not_written_by_the_recorder_are_named_by_their_cell():
    """The recorder writes the test cells in the notebook's order, each in one block numbered
    from 0: a record ahead of its turn, repeated, or for a cell without checks is someone else's."""
    def records(*cells):
        return [{"cell": cell, "index": index} for cell, index in cells]

    order = ["softmax_visible", "softmax_hidden", "cross_entropy_visible"]
    honest = records(("softmax_visible", 0), ("softmax_visible", 1), ("softmax_hidden", 0), ("cross_entropy_visible", 0))
    assert replay.out_of_order(honest, order) == []
    ahead = records(("cross_entropy_visible", 0), ("softmax_visible", 0), ("softmax_hidden", 0))
    assert replay.out_of_order(ahead, order) == ["cross_entropy_visible"]
    repeated = records(("softmax_visible", 0), ("softmax_visible", 0))
    assert replay.out_of_order(repeated, order) == ["softmax_visible"]
    unknown = records(("softmax_visible", 0), ("made_up", 0))
    assert replay.out_of_order(unknown, order) == ["made_up"]


@pytest.mark.skipif(sandbox.bwrap_path() is None, reason="needs bwrap")
def test_a_grader_run_through_a_symlinked_venv_passes_the_precheck(tmp_path):
    """sys.executable and sys.prefix are the symlink's paths: the sandbox must bind them too."""
    import subprocess

    (tmp_path / ".venv").symlink_to(Path(sys.prefix).resolve())
    python = tmp_path / ".venv" / "bin" / "python"
    done = subprocess.run([str(python), "-m", "grader", "check", "--root", str(ROOT)], capture_output=True, text=True,
                          check=False, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "imports the course's course_lib" in done.stdout


def test_the_stored_reference_is_used_only_on_a_machine_like_the_one_that_made_it(tmp_path, monkeypatch):
    """float32 results differ in the last bits across CPUs and library versions (lesson 10's logits by
    1.3e-5 between an AMD EPYC (AVX2) and an Intel Xeon, torch 2.13 and 2.11): a right answer is judged
    against the solution run on the machine that grades it, never against another machine's run."""
    solution = tmp_path / "solutions" / "00_setup" / "00_setup.ipynb"
    solution.parent.mkdir(parents=True)
    solution.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    stored = verdicts.stored_reference(tmp_path, "00_setup", solution.name)
    stored.mkdir(parents=True)
    monkeypatch.setattr(verdicts, "reference_key", lambda path: "k1")
    monkeypatch.setattr(verdicts, "read_records", lambda folder: [str(folder)])
    runs = []

    def run_reference(path, folder, use_sandbox=True, env=None):
        runs.append((folder, env))
        folder.mkdir(parents=True)
        return []

    monkeypatch.setattr(verdicts, "run_reference", run_reference)
    (stored / "key").write_text("k1\n")
    (stored / "machine").write_text(verdicts.machine_fingerprint() + "\n")
    assert verdicts.reference_records(tmp_path, "00_setup") == {solution.name: [str(stored)]}
    assert runs == []

    (stored / "machine").write_text("x86_64 GenuineIntel AVX512, torch 2.11.0, numpy 2.5.2\n")
    first = verdicts.reference_records(tmp_path, "00_setup")
    assert len(runs) == 1, "the solution did not run on this machine"
    assert first[solution.name] != [str(stored)], "another machine's reference was used"
    assert verdicts.reference_records(tmp_path, "00_setup") == first
    assert len(runs) == 1, "the local run is not cached"

    (stored / "machine").unlink()  # a reference that does not say where it was made
    verdicts.reference_records(tmp_path, "00_setup")
    assert len(runs) == 1, "the same key and machine share the cached local run"

    (stored / "machine").write_text(verdicts.machine_fingerprint() + "\n")
    drawn = verdicts.reference_records(tmp_path, "00_setup", seed=77)
    assert len(runs) == 2, "a batch's own seed runs the solution with that seed, not the stored reference"
    assert runs[-1][1] == {"COURSE_GRADING_SEED": "77"}
    assert drawn[solution.name] != [str(stored)]
    verdicts.reference_records(tmp_path, "00_setup", seed=77)
    assert len(runs) == 2, "one run per seed"


def test_a_lost_worker_costs_its_submission_only_and_nothing_it_half_wrote_is_merged(tmp_path, monkeypatch):
    """--jobs: a worker that dies (killed, out of memory) gives its submission 0 and a flag, its
    gradebook copy is dropped unmerged, and the other submissions are graded and merged."""
    import contextlib
    from concurrent.futures import Future

    for student in ("a-worker-dies", "b-next"):
        folder = tmp_path / "submitted" / student / "00_setup"
        folder.mkdir(parents=True)
        (folder / "00_setup.ipynb").write_text("{}")
    (tmp_path / "notebooks" / "00_setup").mkdir(parents=True)
    (tmp_path / "notebooks" / "00_setup" / "00_setup.ipynb").write_text("{}")
    (tmp_path / "gradebook.db").write_text("")
    monkeypatch.setattr(precheck, "check", lambda root, use_sandbox: "ok")
    monkeypatch.setattr(ag, "course_fingerprint", lambda root: {})
    monkeypatch.setattr(verdicts, "reference_records", lambda *a, **k: {})
    monkeypatch.setattr(gradebook, "has_lesson", lambda root, lesson: True)
    monkeypatch.setattr(ag, "protected_names", lambda nb: {})
    monkeypatch.setattr(gradebook, "lesson_scores", lambda root, lesson, db=None: ({"b-next": 4.0}, 8.0))
    forgotten, merged = [], []
    monkeypatch.setattr(gradebook, "forget", lambda root, lesson, student, db=None: forgotten.append(student))
    monkeypatch.setattr(gradebook, "merge_submission", lambda src, dst, lesson, student: merged.append(student))

    class Pool:
        def submit(self, fn, job):
            future = Future()
            if job.student.startswith("a-"):
                future.set_exception(RuntimeError("A process in the process pool was terminated abruptly"))
            else:
                future.set_result(("graded", 1.0, []))
            return future

    monkeypatch.setattr(ag, "engine_pool", lambda engine, jobs, scheduler: contextlib.nullcontext(Pool()))
    results = ag.autograde(tmp_path, ["00_setup"], use_sandbox=False, jobs=2, progress=False)
    assert [(r.student, r.status, r.auto_score) for r in results] == [
        ("a-worker-dies", "grader error", 0.0), ("b-next", "graded", 4.0)]
    assert "its worker failed (RuntimeError" in results[0].flags[0]
    assert merged == ["b-next"], "the lost worker's gradebook copy was merged"
    assert forgotten == ["a-worker-dies"]
    assert not list((tmp_path / gradebook.JOBS).rglob("*.db")), "a gradebook copy was left behind"


# --- records outside the schema --------------------------------------------------------------

def test_records_outside_the_schema_score_their_cell_0_and_never_raise(tmp_path):
    """Every line of a records file is read through one schema: a record without a cell, of an
    unknown kind, with a bad index, options or value tag, or a line that is not JSON, becomes an
    'unreadable record' charged to its cell (or the record before it); the comparator and the
    gradebook step never raise on it."""
    import json

    from course_lib.grading import RECORD_FILE
    from grader.records import UNREADABLE, read_records

    good = {"cell": "softmax_visible", "index": 0, "kind": "equal", "actual": {"value": 1},
            "expected": {"withheld": True}, "options": {"name": "x"}, "tensors": None}
    lines = [json.dumps(good),
             json.dumps({k: v for k, v in good.items() if k != "cell"}),          # no cell: the one before
             json.dumps({**good, "cell": "cross_entropy_visible", "kind": "eval"}),
             json.dumps({**good, "cell": "a", "index": True}),
             json.dumps({**good, "cell": "b", "actual": {"pickle": "gASV"}}),
             json.dumps({**good, "cell": "c", "options": {"hint": ["a list"]}}),
             json.dumps({**good, "cell": "d", "actual": {"tensor": "t9"}}),          # no such tensor
             json.dumps({**good, "cell": "e", "actual": {"list": [{"list": []}] * 3, "x": 1}}),
             "not json at all {", "[1, 2]"]
    (tmp_path / RECORD_FILE).write_text("\n".join(lines) + "\n")
    records = read_records(tmp_path)
    assert records[0]["actual"] == 1
    assert records[0]["kind"] == "equal"
    unreadable = [(r["cell"], r["actual"]) for r in records if r["kind"] == UNREADABLE]
    assert [cell for cell, _ in unreadable] == ["softmax_visible", "cross_entropy_visible", "a", "b", "c", "d", "e",
                                                "e", "e"]
    assert "without cell" in unreadable[0][1], unreadable
    assert "unknown kind 'eval'" in unreadable[1][1], unreadable
    reference = [{**good, "expected": 1, "actual": 1},
                 {**good, "cell": "cross_entropy_visible", "expected": 1, "actual": 1}]
    results = verdicts.compare(reference, records)
    assert results["softmax_visible"][0].startswith("unreadable record: a record without cell"), results
    assert verdicts.UNREADABLE_RECORD in results["cross_entropy_visible"][1]
    assert replay.out_of_order(records, ["softmax_visible", "cross_entropy_visible"]) != []
