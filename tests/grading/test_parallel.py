"""Grading a class in parallel, in shards and on Dask gives exactly what one serial run gives.

One course folder with lesson 00 and five submissions (full marks, wrong answers, two attacks
the grader flags, and a folder without a notebook) is graded four ways, each in its own
copy of the folder, through the command line an instructor uses (`python -m grader ...`):
serially; with --jobs 2; as --shard 1/2 and --shard 2/2 merged with `python -m grader merge`;
and on a Dask LocalCluster of two workers. The report (scores, statuses and flags), every grade
in the gradebook, and the graded notebooks must be the same.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from grader import autograde as ag
from grader import gradebook, processes, report, sandbox
from grader import merge as merge_verb
from tests.grading import submissions as subs

ROOT = Path(__file__).resolve().parents[2]
LESSON = "00_setup"
NAME = f"{LESSON}.ipynb"
SANDBOX_FLAGS = [] if sandbox.bwrap_path() else ["--no-sandbox"]
# Shards of two take every other id in sorted order: an attack and a graded honest answer in each.
EXPECTED_SHARDS = {"ada-solution": 1, "bob-patches-expected": 2, "cy-patches-isclose": 1, "dee-wrong": 2,
                   "fay-no-notebook": 1}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("parallel-template")
    shutil.copy(ROOT / "nbgrader_config.py", root)
    (root / "course_lib").symlink_to(ROOT / "course_lib")
    shutil.copytree(ROOT / "solutions" / LESSON, root / "solutions" / LESSON)
    shutil.copytree(ROOT / "reference-checks" / LESSON, root / "reference-checks" / LESSON)
    done = processes.nbgrader(root, "generate_assignment", LESSON, "--force")
    assert done.returncode == 0, done.stdout + done.stderr
    solution = nbformat.read(root / "solutions" / LESSON / NAME, as_version=4)
    student = nbformat.read(root / "notebooks" / LESSON / NAME, as_version=4)
    notebooks = {
        "ada-solution": solution,
        "bob-patches-expected": subs.with_sources(student, subs.GRADING_ATTACKS["patches-expected"][0]),
        "cy-patches-isclose": subs.with_answer(student, "softmax_answer", subs.HOSTILE_ANSWERS["patches-isclose"]),
        "dee-wrong": subs.with_wrong_answers(student, subs.WRONG_ANSWERS[LESSON], 0),
    }
    for name, nb in notebooks.items():
        subs.write(nb, root / "submitted" / name / LESSON / NAME)
    (root / "submitted" / "fay-no-notebook" / LESSON).mkdir(parents=True)
    return root


def _copy(template: Path, folder: Path) -> Path:
    shutil.copytree(template, folder, symlinks=True)
    return folder


def _snapshot(root: Path) -> dict:
    """What a batch leaves: the report without timings, every grade, the graded notebooks."""
    with open(root / "autograded" / report.REPORT, newline="") as f:
        rows = [{k: v.replace(str(root), "<root>") for k, v in row.items() if k != "seconds"}
                for row in csv.DictReader(f)]
    with Gradebook(gradebook.url(gradebook.main_db(root))) as gb:
        grades = {(s.student.id, g.name): (g.auto_score, g.manual_score, g.needs_manual_grade)
                  for s in gb.find_assignment(LESSON).submissions for nb in s.notebooks for g in nb.grades}
    graded = sorted(str(p.relative_to(root)) for p in (root / "autograded").rglob("*.ipynb"))
    return {"report": rows, "grades": grades, "graded": graded}


@pytest.fixture(scope="module")
def serial(template, tmp_path_factory):
    root = _copy(template, tmp_path_factory.mktemp("serial") / "course")
    assert ag.main([LESSON, "--seed", "0", "--root", str(root), "--jobs", "1", "--no-progress", *SANDBOX_FLAGS]) == 0
    return _snapshot(root)


def test_the_serial_run_grades_as_the_round_trip_does(serial):
    rows = {r["student"]: r for r in serial["report"]}
    assert set(rows) == set(EXPECTED_SHARDS)
    assert float(rows["ada-solution"]["autograded_score"]) == 8.0
    assert rows["ada-solution"]["flags"] == ""
    for student in ("bob-patches-expected", "cy-patches-isclose", "fay-no-notebook"):
        assert float(rows[student]["autograded_score"]) == 0.0, student
    assert float(rows["dee-wrong"]["autograded_score"]) < 8.0
    for attack in ("bob-patches-expected", "cy-patches-isclose"):
        assert rows[attack]["flags"], f"{attack} is not flagged"
    assert rows["fay-no-notebook"]["status"] == "no notebook"


def test_two_jobs_give_exactly_the_serial_run(serial, template, tmp_path):
    root = _copy(template, tmp_path / "course")
    assert ag.main([LESSON, "--seed", "0", "--root", str(root), "--jobs", "2", "--no-progress", *SANDBOX_FLAGS]) == 0
    assert _snapshot(root) == serial
    assert not list((root / gradebook.JOBS).rglob("*.db")), "a submission's gradebook copy was left behind"


def test_shards_merged_give_exactly_the_serial_run(serial, template, tmp_path):
    """Shard 1 of 2 runs in a copy of the course (another machine, say), shard 2 in the course
    folder itself (a shared filesystem); `python -m grader merge` brings both into the course."""
    assert gradebook.shard_students(list(EXPECTED_SHARDS), (1, 2)) == {s for s, i in EXPECTED_SHARDS.items() if i == 1}
    elsewhere, root = _copy(template, tmp_path / "elsewhere"), _copy(template, tmp_path / "course")
    for shard, folder in (("1/2", elsewhere), ("2/2", root)):
        assert ag.main([LESSON, "--seed", "0", "--root", str(folder), "--shard", shard, "--jobs", "1", "--no-progress",
                        *SANDBOX_FLAGS]) == 0
    with open(root / gradebook.SHARDS / "2-of-2" / report.REPORT, newline="") as f:
        assert {r["student"] for r in csv.DictReader(f)} == {s for s, i in EXPECTED_SHARDS.items() if i == 2}
    assert not (root / "autograded" / report.REPORT).exists(), "a shard wrote the course's own report"
    assert merge_verb.main([str(elsewhere), str(root), "--root", str(root)]) == 0
    assert _snapshot(root) == serial


def test_a_missing_shard_is_reported(template, tmp_path):
    root = _copy(template, tmp_path / "course")
    folder = root / gradebook.SHARDS / "1-of-3"
    folder.mkdir(parents=True)
    shutil.copy(root / gradebook.MAIN, folder / gradebook.MAIN)
    (folder / report.REPORT).write_text(",".join(report.CSV_HEADER) + "\n")
    rows, warnings = merge_verb.merge(root, [root])
    assert rows == []
    assert any("2/3, 3/3 not found" in w for w in warnings), warnings
    assert merge_verb.main(["--root", str(root)]) == 1


def test_a_submission_no_shard_graded_is_reported(template, tmp_path):
    """submitted/ changed between shard runs: the merge names what no shard graded."""
    root = _copy(template, tmp_path / "course")
    folder = root / gradebook.SHARDS / "1-of-1"
    folder.mkdir(parents=True)
    shutil.copy(root / gradebook.MAIN, folder / gradebook.MAIN)
    with open(folder / report.REPORT, "w", newline="") as f:  # a run that saw only fay's empty folder
        csv.writer(f).writerows([report.CSV_HEADER, [LESSON, "fay-no-notebook", "no notebook", 0.0, 8.0, 0.0, "-"]])
    _, warnings = merge_verb.merge(root, [root])
    assert any("no shard graded ada-solution, bob-patches-expected" in w for w in warnings), warnings


def test_a_dask_cluster_gives_exactly_the_serial_run(serial, template, tmp_path):
    root = _copy(template, tmp_path / "course")
    assert ag.main([LESSON, "--seed", "0", "--root", str(root), "--engine", "dask", "--jobs", "2", "--no-progress",
                    *SANDBOX_FLAGS]) == 0
    assert _snapshot(root) == serial
