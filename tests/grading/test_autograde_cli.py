"""`make autograde` as an instructor runs it: grader/autograde.py's command line on a fresh course
folder (nothing released yet), then again with --resume."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from grader import autograde as ag
from grader import sandbox

ROOT = Path(__file__).resolve().parents[2]
LESSON = "00_setup"


def test_a_fresh_course_is_released_graded_reported_and_resumed(tmp_path, capsys):
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    (tmp_path / "course_lib").symlink_to(ROOT / "course_lib")
    shutil.copytree(ROOT / "solutions" / LESSON, tmp_path / "solutions" / LESSON)
    submitted = tmp_path / "submitted" / "ada" / LESSON
    submitted.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb", submitted)
    (tmp_path / "submitted" / "bob" / LESSON).mkdir(parents=True)  # an empty submission folder
    flags = [] if sandbox.bwrap_path() else ["--no-sandbox"]

    assert ag.main([LESSON, "--root", str(tmp_path), *flags]) == 0
    report = tmp_path / "autograded" / "autograde-report.csv"
    rows = list(csv.DictReader(report.open()))
    assert [(r["student"], r["status"], float(r["autograded_score"])) for r in rows] == [
        ("ada", "graded", 8.0), ("bob", "no notebook", 0.0)]
    assert rows[1]["flags"] == f"submitted/bob/{LESSON}/ holds no notebook (expected {LESSON}.ipynb); 0 points"

    capsys.readouterr()
    assert ag.main([LESSON, "--root", str(tmp_path), "--resume", *flags]) == 0
    assert "ada" not in capsys.readouterr().out, "--resume must skip a submission already in the report"
    assert len(list(csv.DictReader(report.open()))) == 2
