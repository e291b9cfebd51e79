"""Hidden-test verdicts decided in the grader's process, not in the learner's.

An answer runs in the same Python process as the tests that judge it, so whatever that process
reports (nbgrader reads pass or fail from the kernel) is only as good as the answer's manners.
The answer policy (grader/answer_policy.py) and the sandbox (grader/sandbox.py) narrow what an
answer can do; this module takes the verdict itself out of its reach:

1. The instructor's run of the solution (grader/reference.py) records, for every check, the
   observed value, the expected value and the check's options.
2. A submission's kernel runs each test cell as written, with COURSE_WITHHOLD_EXPECTED=1: no
   check calls its `expect=` function and no `if expecting():` block runs, so the kernel only
   records the learner's observations (tools/lint_test_cells.py keeps test cells that way).
   Each graded test cell is announced to the kernel first (`begin_checks`), which also records
   whether the grading machinery was replaced.
3. `compare` replays, in this process, each of the learner's observations against the
   reference's expected value with the same helper and the reference's options, so a failure
   carries the notebook's message, worded from the learner's own value. A cell passes only if it
   made as many checks as the reference, of the same kinds, and each passed.
4. `apply` lowers to 0 the gradebook score of every cell that fails here and writes why into the
   graded notebook. It never raises a score. It flags a replaced grading machinery, a kernel
   that computed expected values, and unreadable records. A late submission's penalty, which
   nbgrader set from the kernel's scores, is set again from the lowered ones (`late_penalty_again`).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import nbformat

from course_lib.grading import WITHHELD
from grader.cells import is_test_cell, nbgrader_meta
from grader.course import Course
from grader.records import UNREADABLE, replay_check


def _by_cell(records: list[dict]) -> dict[str, list[dict]]:
    cells: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        cells[record["cell"]].append(record)
    return cells


def _replay(kind: str, actual, expected, options: dict) -> str | None:
    """replay_check, where a recorded value the check cannot even handle (a shape with negative
    sizes, a value of the wrong type: anything a kernel can write) fails the check instead of
    stopping the grader."""
    try:
        return replay_check(kind, actual, expected, options)
    except Exception as error:  # noqa: BLE001 (records come from the learner's process)
        return f"the recorded value cannot be checked ({type(error).__name__}: {str(error)[:120]})"


#: A note on a cell whose kernel computed an expected value: it ran with expected values on (not
#: under `make autograde`, or the answer turned them on); the verdict is still the grader's replay.
EXPECTED_IN_KERNEL = "expected values computed in the kernel"
#: A note on a cell before which the kernel's grading machinery had been changed
#: (`course_lib.grading.check_machinery`); followed by ": " and what changed.
MACHINERY = "grading machinery changed"
_SIDE_RECORDS = ("machinery", UNREADABLE)
#: A note on a cell with a record that is not what the recorder writes (grader/records.py).
UNREADABLE_RECORD = "unreadable record"


def _machinery_notes(records: list[dict]) -> list[str]:
    changed = [str(name) for r in records if r["kind"] == "machinery"
               for name in (r["actual"] if isinstance(r["actual"], list) else [r["actual"]])]
    return [f"{MACHINERY}: {', '.join(changed[:8])}"] if changed else []


def _judge(cell_reference: list[dict], cell_learner: list[dict]) -> tuple[str | None, list[str]]:
    """(failure or None, notes) of one cell: the learner's observations, check by check, against
    the reference's expected values, with the reference's options (tolerances, names, hints)."""
    notes = _machinery_notes(cell_learner)
    unreadable = [r["actual"] for r in cell_learner if r["kind"] == UNREADABLE]
    if unreadable:
        return f"{UNREADABLE_RECORD}: {unreadable[0]}", [UNREADABLE_RECORD]
    expected = [r for r in cell_reference if r["kind"] not in _SIDE_RECORDS]
    got = [r for r in cell_learner if r["kind"] not in _SIDE_RECORDS]
    if any(r["expected"] is not WITHHELD and r["kind"] not in ("true", "raises") for r in got):
        notes.append(EXPECTED_IN_KERNEL)
    for i, ref in enumerate(expected):
        if i >= len(got):
            name = ref["options"].get("name") or ref["options"].get("message", "")
            return f"{len(got)} of its {len(expected)} checks ran; the next one is '{name}'", notes
        if got[i]["kind"] != ref["kind"]:
            return f"check {i + 1} is of another kind ({got[i]['kind']}) than in the reference ({ref['kind']})", notes
        message = _replay(ref["kind"], got[i]["actual"], ref["expected"], _options(ref, got[i]))
        if message is not None:
            return message, notes
    if len(got) > len(expected):
        return f"{len(got)} checks ran where the reference makes {len(expected)}", notes
    return None, notes


#: The longest message of the learner's own kernel that feedback quotes.
MESSAGE_CHARS = 2000


def _options(reference: dict, learner: dict) -> dict:
    """The options a check is replayed with: the reference's (tolerances, names, hints), except
    an `assert_true` message, which is worded from the learner's own values in its kernel (the
    memory it used, the shape it made) and so is taken from the learner's record."""
    message = learner["options"].get("message") if isinstance(learner.get("options"), dict) else None
    if reference["kind"] == "true" and isinstance(message, str):
        return {**reference["options"], "message": message[:MESSAGE_CHARS]}
    return reference["options"]


def compare(reference: list[dict], learner: list[dict]) -> dict[str, tuple[str | None, list[str]]]:
    """{cell: (failure or None, notes)} for every cell the reference made checks in."""
    theirs = _by_cell(learner)
    return {cell: _judge(records, theirs.get(cell, [])) for cell, records in _by_cell(reference).items()}


#: Stream outputs a test cell prints when it gets to its end, which a failed replay contradicts.
_PASSED_LINE = "tests passed"


def apply(root: Path, lesson: str, student: str, notebook: str,
          verdicts: dict[str, tuple[str | None, list[str]]], db: Path | None = None) -> list[str]:
    """Lower to 0 each cell the grader fails, in the gradebook `db` (default the course's), and
    show why in the graded notebook; returns the flags: a replaced grading machinery, a kernel
    that computed expected values, an unreadable record."""
    from nbgrader.api import Gradebook, MissingEntry

    from grader import gradebook

    flags, overturned, lowered = [], {}, False
    stem = Path(notebook).stem
    db_url = gradebook.url(db or gradebook.main_db(root))
    with Gradebook(db_url) as gb:
        for cell, (failure, notes) in verdicts.items():
            flags += [f"{cell}: before this test cell ran, the kernel's {note} (the verdicts are the grader's "
                      "replay, not the kernel's); review by hand" for note in notes if note.startswith(MACHINERY)]
            if EXPECTED_IN_KERNEL in notes:
                flags.append(f"{cell}: its kernel computed expected values, which a graded kernel never does "
                             "(the verdicts are the grader's replay); review by hand")
            if failure is None:
                continue
            try:
                grade = gb.find_grade(cell, stem, lesson, student)
            except MissingEntry:
                continue
            score = grade.auto_score or 0.0
            if score > 0:
                grade.auto_score = 0.0
                overturned[cell] = failure
                lowered = True
            elif " checks ran" not in failure:  # a value that failed: the first reason, before any later error
                overturned[cell] = failure
            if UNREADABLE_RECORD in notes:
                flags.append(f"{cell}: {failure[:300]}; scored 0, review by hand")
        gb.db.commit()
        late = lowered and gb.find_submission(lesson, student).total_seconds_late > 0
    if late:
        late_penalty_again(root, lesson, student, stem, db_url)
    if overturned:  # the feedback shows why the cell scored 0
        path = Course(root).autograded(student, lesson) / notebook
        if path.exists():
            nb = nbformat.read(path, as_version=4)
            for cell in nb.cells:
                message = overturned.get(nbgrader_meta(cell).get("grade_id")) if is_test_cell(cell) else None
                if message is not None:
                    cell.outputs = [o for o in cell.outputs if o.output_type not in ("error",)
                                    and not (o.output_type == "stream" and _PASSED_LINE in o.get("text", ""))]
                    cell.outputs.append(nbformat.v4.new_output("error", ename="AssertionError", evalue=message,
                                                               traceback=[f"AssertionError: {message}"]))
            nbformat.write(nb, path)
    return flags


def late_penalty_again(root: Path, lesson: str, student: str, notebook: str, db_url: str) -> None:
    """Set a late notebook's penalty again, from its scores after the replay. `nbgrader autograde`
    sets it (AssignLatePenalties, with the configured LateSubmissionPlugin) from the kernel's scores,
    where every check passes: left so, a late wrong answer would lose the points it never kept (with
    nbgrader's "zero" method, a total below 0). This runs nbgrader's own preprocessor again, with
    the configuration nbgrader read for the course."""
    from nbgrader.preprocessors import AssignLatePenalties

    from grader.course import nbgrader_config

    resources = {"nbgrader": {"notebook": notebook, "assignment": lesson, "student": student, "db_url": db_url}}
    AssignLatePenalties(config=nbgrader_config(root)).preprocess(nbformat.v4.new_notebook(), resources)
