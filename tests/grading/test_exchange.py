"""The instructor's whole workflow through nbgrader's exchange, end to end, for two students.

In a temporary course folder and a temporary exchange (COURSE_EXCHANGE, read by nbgrader_config.py):
the instructor adds the students and releases lesson 00 (`nbgrader release_assignment`); each
student fetches it into a folder of their own and submits (`nbgrader fetch_assignment`, `submit`),
ada the solution's answers before the due date, bob one wrong answer after it; the instructor
collects (`nbgrader collect`), grades with the course's grader (`make autograde`'s code) under
nbgrader's "zero" late penalty, writes the feedback (`python -m grader feedback`) and releases it
(`nbgrader release_feedback`); each student fetches their own feedback (`nbgrader fetch_feedback`)
and nobody else's. Every step is nbgrader's real command.

One OS account plays both students: nbgrader 0.9 names a submission after the account
(`pwd.getpwuid(os.getuid())`, not $USER), so each submits with `--student`, as an instructor can
for a learner; each student has a home of their own (their nbgrader cache, where the submission's
secret that unlocks its feedback is kept), as separate accounts have.
"""

from __future__ import annotations

import csv
import datetime
import os
import re
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from grader import autograde as ag
from grader import feedback, gradebook, processes, reference, sandbox
from grader.cells import nbgrader_meta
from grader.course import nbgrader_config
from grader.nbgrader_plugins import GRADER_RUN_ENV

ROOT = Path(__file__).resolve().parents[2]
LESSON = "00_setup"
REFERENCE_CACHE = ROOT / "build" / "verdict-reference"  # shared with the round trip
# As in the round trip: sandboxed wherever bubblewrap works; CI sets REQUIRE_SANDBOX=1.
SANDBOX = sandbox.bwrap_path() is not None
if os.environ.get("REQUIRE_SANDBOX") == "1" and not SANDBOX:
    raise RuntimeError("REQUIRE_SANDBOX=1 but bwrap is missing or cannot create namespaces: " + ag.NO_SANDBOX)
WRONG_SOFTMAX = "def stable_softmax(x, dim=-1):\n    return x"


def _instructor(root: Path, *args: str) -> str:
    done = processes.nbgrader(root, *args, timeout=120)
    assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stdout}"
    return done.stdout


def _student(home: Path, exchange: Path, *args: str) -> str:
    """`nbgrader ARGS` as the learner whose home (and working folder, a clone of the course's
    nbgrader_config.py) is `home`."""
    env = {k: v for k, v in os.environ.items() if k not in (GRADER_RUN_ENV, "JUPYTER_DATA_DIR")}
    env.update(HOME=str(home), COURSE_EXCHANGE=str(exchange))
    with tempfile.NamedTemporaryFile(mode="w+", prefix="nbgrader-log-") as log:
        process = processes.start_nbgrader(list(args), home, env, log)
        code = process.wait(120)
        log.seek(0)
        output = log.read()
    assert code == 0, f"{home.name}: nbgrader {' '.join(args)} failed:\n{output}"
    return output


def _answered(path: Path, answers: dict[str, str]) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if nbgrader_meta(cell).get("grade_id") in answers:
            cell.source = answers[nbgrader_meta(cell)["grade_id"]]
    nbformat.write(nb, path)


def _formgrader_finds_the_exchange(root: Path) -> bool:
    """What the Formgrader's Manage Assignments page decides (no "exchange directory ... does not
    exist" banner, release and collect buttons on)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    config = nbgrader_config(root)
    api = NbGraderAPI(CourseDirectory(config=config, root=str(root)), config=config)
    return bool(api.exchange_is_functional)


@pytest.mark.grading
def test_two_students_through_the_exchange_release_to_feedback(tmp_path, monkeypatch):
    root, exchange = tmp_path / "course", tmp_path / "exchange"
    root.mkdir()
    config = (ROOT / "nbgrader_config.py").read_text() + '\nc.LateSubmissionPlugin.penalty_method = "zero"\n'
    (root / "nbgrader_config.py").write_text(config)
    (root / "course_lib").symlink_to(ROOT / "course_lib")
    shutil.copytree(ROOT / "solutions" / LESSON, root / "solutions" / LESSON)
    shutil.copytree(ROOT / reference.STORED / LESSON, root / reference.STORED / LESSON)
    monkeypatch.setenv("COURSE_EXCHANGE", str(exchange))
    assert not _formgrader_finds_the_exchange(root), "the Formgrader should say the exchange does not exist yet"

    # The instructor: the release (`make release`), the class list, the exchange.
    _instructor(root, "generate_assignment", LESSON, "--force")
    _instructor(root, "db", "student", "add", "ada", "--first-name=Ada", "--last-name=Lovelace",
                "--email=ada@example.org")
    (root / "students.csv").write_text("id,first_name,last_name,email\nbob,Bob,Babbage,bob@example.org\n")
    _instructor(root, "db", "student", "import", "students.csv")
    _instructor(root, "release_assignment", LESSON)
    assert (exchange / "llm-internals" / "outbound" / LESSON / f"{LESSON}.ipynb").is_file()
    assert (exchange.stat().st_mode & 0o777) == 0o777, "release_assignment should leave the exchange writable by all"
    assert _formgrader_finds_the_exchange(root)

    # The students: each fetches into their own folder; ada submits the solution's answers on time.
    solution = nbformat.read(root / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    answers = {nbgrader_meta(c)["grade_id"]: c.source for c in solution.cells
               if c.cell_type == "code" and nbgrader_meta(c).get("solution")}
    homes = {name: tmp_path / name for name in ("ada", "bob")}
    for home in homes.values():
        home.mkdir()
        shutil.copy(root / "nbgrader_config.py", home)
        _student(home, exchange, "fetch_assignment", LESSON)
    _answered(homes["ada"] / LESSON / f"{LESSON}.ipynb", answers)
    _student(homes["ada"], exchange, "submit", LESSON, "--student=ada")
    # The due date passes; bob hands in a wrong stable_softmax (the cross-entropy left undone) late.
    due = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    _instructor(root, "db", "assignment", "add", LESSON, f"--duedate={due}")
    _answered(homes["bob"] / LESSON / f"{LESSON}.ipynb", {"softmax_answer": WRONG_SOFTMAX})
    _student(homes["bob"], exchange, "submit", LESSON, "--student=bob")

    # The instructor collects, grades, writes and releases the feedback.
    _instructor(root, "collect", LESSON)
    assert sorted(p.name for p in (root / "submitted").iterdir()) == ["ada", "bob"]
    results = ag.autograde(root, [LESSON], use_sandbox=SANDBOX, reference_cache=REFERENCE_CACHE)
    assert [(r.student, r.status, r.auto_score, r.flags) for r in results] == [
        ("ada", "graded", 8.0, []), ("bob", "graded", 0.0, [])]
    with Gradebook(gradebook.url(root / "gradebook.db")) as gb:
        ada, bob = gb.find_submission(LESSON, "ada"), gb.find_submission(LESSON, "bob")
        assert (ada.code_score, ada.total_seconds_late, ada.late_submission_penalty) == (8.0, 0, 0.0)
        assert bob.total_seconds_late > 0, "bob handed in after the due date"
        # nbgrader's "zero" takes the whole score, here the 0 the replay left (not the kernel's 4)
        assert (bob.code_score, bob.late_submission_penalty) == (0.0, 0.0)
    assert feedback.main([LESSON, "--root", str(root)]) == 0
    with open(root / "grades.csv", newline="") as f:
        rows = {r["student_id"]: [r[k] for k in ("first_name", "last_name", "email", "score", "late_submission_penalty")]
                for r in csv.DictReader(f)}
    assert rows == {"ada": ["Ada", "Lovelace", "ada@example.org", "8", "0"],
                    "bob": ["Bob", "Babbage", "bob@example.org", "0", "0"]}
    _instructor(root, "release_feedback", LESSON)

    # Each student fetches their own feedback, and only theirs.
    for name, home in homes.items():
        _student(home, exchange, "fetch_feedback", LESSON)
        pages = list((home / LESSON / "feedback").glob("*/*.html"))
        assert len(pages) == 1, f"{name} fetched {pages}"
        assert pages[0].read_bytes() == (root / "feedback" / name / LESSON / f"{LESSON}.html").read_bytes()
    pages = {name: next((home / LESSON / "feedback").glob("*/*.html")).read_text() for name, home in homes.items()}
    totals = {name: re.search(r"<h4>00_setup \(Score: (.*?)\)</h4>", page).group(1) for name, page in pages.items()}
    assert totals == {"ada": "8.0 / 10.0", "bob": "0.0 / 10.0"}
