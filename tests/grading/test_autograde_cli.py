"""`make autograde` as an instructor runs it: grader/autograde.py's command line on a fresh course
folder (nothing released yet), then again with --resume."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

from grader import autograde as ag
from grader import flags as grader_flags
from grader import nbgrader_plugins, processes, sandbox

ROOT = Path(__file__).resolve().parents[2]
LESSON = "00_setup"


def test_a_fresh_course_is_released_graded_reported_and_resumed(tmp_path, capsys):
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    (tmp_path / "course_lib").symlink_to(ROOT / "course_lib")
    shutil.copytree(ROOT / "solutions" / LESSON, tmp_path / "solutions" / LESSON)
    submitted = tmp_path / "submitted" / "ada" / LESSON
    submitted.mkdir(parents=True)
    solution = nbformat.read(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    visible = next(c for c in solution.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "softmax_visible")
    visible.source = "pass  # edited: restored from the release before grading, and flagged"
    nbformat.write(solution, submitted / f"{LESSON}.ipynb")
    (tmp_path / "submitted" / "bob" / LESSON).mkdir(parents=True)  # an empty submission folder
    flags = [] if sandbox.bwrap_path() else ["--no-sandbox"]

    assert ag.main([LESSON, "--seed", "0", "--root", str(tmp_path), *flags]) == 0
    report = tmp_path / "autograded" / "autograde-report.csv"
    rows = list(csv.DictReader(report.open()))
    assert [(r["student"], r["status"], float(r["autograded_score"])) for r in rows] == [
        ("ada", "graded", 8.0), ("bob", "no notebook", 0.0)]
    assert rows[0]["flags"] == "edited test cell(s) softmax_visible (restored from the release before grading)"
    assert rows[1]["flags"] == f"submitted/bob/{LESSON}/ holds no notebook (expected {LESSON}.ipynb); 0 points"
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:  # the Formgrader lists it as flagged
        assert gb.find_submission_notebook(LESSON, LESSON, "ada").flagged
    capsys.readouterr()
    assert grader_flags.main([LESSON, "--root", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "edited test cell(s) softmax_visible" in listed, listed
    assert "holds no notebook" in listed, listed

    capsys.readouterr()
    assert ag.main([LESSON, "--seed", "0", "--root", str(tmp_path), "--resume", *flags]) == 0
    assert "ada" not in capsys.readouterr().out, "--resume must skip a submission already in the report"
    assert len(list(csv.DictReader(report.open()))) == 2

    assert ag.main([LESSON, "--seed", "0", "--root", str(tmp_path), "--student", "bob", *flags]) == 0
    assert "ada" not in capsys.readouterr().out, "--student bob graded another student"
    assert [r["student"] for r in csv.DictReader(report.open())] == ["ada", "bob"], "ada's row was lost"


FORMGRADER_AUTOGRADE = """
import runpy, sys
from traitlets.config import Config
from nbgrader.apps.api import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
config = Config()
runpy.run_path("nbgrader_config.py", init_globals={"get_config": lambda: config})
api = NbGraderAPI(coursedir=CourseDirectory(config=config, root="."), config=config)
result = api.autograde(sys.argv[1], sys.argv[2])  # what the Formgrader's Autograde button calls
print("success" if result["success"] else "refused", result.get("error", ""), result.get("log", ""))
"""


def _refused(root: Path, *command: str) -> str:
    """Run `command` in the course as an instructor would, outside the grader; its output."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != nbgrader_plugins.GRADER_RUN_ENV}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run([sys.executable, *command], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def test_plain_nbgrader_and_the_formgrader_button_refuse_and_name_make_autograde(tmp_path):
    """Both routes would grade with no sandbox, no policy and no verdicts outside the kernel:
    each refuses before any cell runs, names `make autograde`, and changes no grade."""
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    (tmp_path / "course_lib").symlink_to(ROOT / "course_lib")
    shutil.copytree(ROOT / "solutions" / LESSON, tmp_path / "solutions" / LESSON)
    submitted = tmp_path / "submitted" / "ada" / LESSON
    submitted.mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb", submitted)  # untouched: no cell passes
    assert processes.nbgrader(tmp_path, "generate_assignment", LESSON, "--force").returncode == 0
    plain = _refused(tmp_path, "-m", "nbgrader", "autograde", LESSON, "--student", "ada")
    assert not plain.startswith("exit 0"), plain
    assert "make autograde" in plain, plain
    button = _refused(tmp_path, "-c", FORMGRADER_AUTOGRADE, LESSON, "ada")
    assert "\nrefused" in button, button
    assert "make autograde" in button, button
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        students = [s.id for s in gb.students]
        scores = [g.auto_score for g in gb.find_submission_notebook(LESSON, LESSON, "ada").grades] if "ada" in students else []
    assert all(s is None for s in scores), f"a refused route wrote grades: {scores}"
