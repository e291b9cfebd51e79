"""grader/verdicts.py: a recorded value no check can handle, records outside the schema, the stored reference,
and a late submission's penalty after the replay."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from grader import replay, verdicts

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def _alembic_on_path(monkeypatch):
    """A new gradebook runs `alembic` (installed beside this Python) to stamp its schema."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def test_a_recorded_value_no_check_can_handle_fails_that_check_instead_of_stopping_the_grader():
    reference = [{"cell": "a", "index": 0, "kind": "shape", "actual": torch.tensor([2, 3]), "expected": [2, 3],
                  "options": {"name": "out", "hint": None}}]
    forged = [{**reference[0], "actual": torch.tensor([-1, 3])}]  # torch.empty([-1, 3]) raises RuntimeError
    failure, _ = verdicts.compare(reference, forged)["a"]
    assert failure is not None
    assert "expected shape" in failure or "cannot be checked" in failure, failure
    odd = [{**reference[0], "actual": torch.tensor([[1.5]])}]
    assert verdicts.compare(reference, odd)["a"][0] is not None


def test_records_outside_the_schema_score_their_cell_0_and_never_raise(tmp_path):
    """Every line of a records file is read through one schema: a record without a cell, of an
    unknown kind, with a bad index, options or value tag, or a line that is not JSON, becomes an
    'unreadable record' charged to its cell (or the record before it); the comparator and the
    gradebook step never raise on it."""

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


def _late_course(root: Path, penalty_config: str, course_config: bool = True) -> Path:
    """A course folder whose gradebook holds bob's submission of 00_setup, an hour late, with
    the grades and the late penalty `nbgrader autograde` left: every check passed in the kernel
    (3 cells of 2 points) and the "zero" method took it all (6)."""
    import datetime

    from nbgrader.api import Gradebook

    from grader import gradebook

    config = (ROOT / "nbgrader_config.py").read_text()
    (root / "nbgrader_config.py").write_text(config + (penalty_config if course_config else ""))
    due = datetime.datetime(2026, 11, 20, 12, 0)
    with Gradebook(gradebook.url(root / "gradebook.db")) as gb:
        gb.add_assignment("00_setup", duedate=due)
        gb.add_notebook("00_setup", "00_setup")
        for cell in ("a_visible", "a_hidden", "b_visible"):
            gb.add_grade_cell(cell, "00_setup", "00_setup", max_score=2.0, cell_type="code")
        gb.add_student("bob", first_name="Bob", email="bob@example.org")
        gb.add_submission("00_setup", "bob", timestamp=due + datetime.timedelta(hours=1))
        for cell in ("a_visible", "a_hidden", "b_visible"):
            grade = gb.find_grade(cell, "00_setup", "00_setup", "bob")
            grade.auto_score, grade.needs_manual_grade = 2.0, False
        gb.find_submission_notebook("00_setup", "00_setup", "bob").late_submission_penalty = 6.0
        gb.db.commit()
    return root / "gradebook.db"


def _penalty_and_score(db: Path) -> tuple[float | None, float]:
    from nbgrader.api import Gradebook

    from grader import gradebook

    with Gradebook(gradebook.url(db)) as gb:
        notebook = gb.find_submission_notebook("00_setup", "00_setup", "bob")
        return notebook.late_submission_penalty, notebook.score


ZERO = '\nc.LateSubmissionPlugin.penalty_method = "zero"\n'


@pytest.mark.usefixtures("_alembic_on_path")
def test_a_late_penalty_is_set_again_from_the_scores_the_replay_left(tmp_path):
    """nbgrader set the penalty from the kernel's scores (6 of 6, all taken by "zero"); the replay
    fails one cell, so 4 are left, and "zero" takes 4, not 6 (which would total -2 in the feedback)."""
    db = _late_course(tmp_path, ZERO)
    verdicts.apply(tmp_path, "00_setup", "bob", "00_setup.ipynb",
                   {"a_visible": (None, []), "a_hidden": ("expected 1, got 2", []), "b_visible": (None, [])})
    assert _penalty_and_score(db) == (4.0, 4.0)


@pytest.mark.usefixtures("_alembic_on_path")
def test_a_late_penalty_configured_outside_the_course_is_kept(tmp_path, monkeypatch):
    """The penalty may be configured where nbgrader also looks (a Jupyter config folder such as
    /etc/jupyter): setting it again reads the configuration nbgrader read, not only the course's."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "nbgrader_config.py").write_text("c = get_config()" + ZERO)
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(tmp_path / "etc"))
    (tmp_path / "course").mkdir()
    db = _late_course(tmp_path / "course", ZERO, course_config=False)
    verdicts.apply(tmp_path / "course", "00_setup", "bob", "00_setup.ipynb", {"a_hidden": ("wrong", [])})
    assert _penalty_and_score(db) == (4.0, 4.0)


@pytest.mark.usefixtures("_alembic_on_path")
def test_a_late_penalty_stays_when_the_replay_lowers_nothing(tmp_path):
    db = _late_course(tmp_path, ZERO)
    verdicts.apply(tmp_path, "00_setup", "bob", "00_setup.ipynb", {"a_visible": (None, []), "a_hidden": (None, [])})
    assert _penalty_and_score(db) == (6.0, 6.0)
