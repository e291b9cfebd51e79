"""A submission before it runs: compared with the release (deleted and edited graded cells, answers
that reach for the grading machinery), then copied read-only into the staging area with every
answer that breaks grader/answer_policy.py withheld. submitted/ itself is never changed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat

from grader.answer_policy import notebook_definitions, policy_violations, withhold
from grader.cells import is_answer_cell, is_test_cell, nbgrader_meta
from grader.course import Course


def _nbgrader_cells(path: Path) -> dict[str, nbformat.NotebookNode]:
    nb = nbformat.read(path, as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells if "grade_id" in c.metadata.get("nbgrader", {})}


# Answers have no business touching the grading machinery; such a cell is flagged for review.
TAMPERING = re.compile(
    r"course_lib\.grading|\bforbid\b|\bassert_(?:tensor_close|shape|sequence_equal)\b|__code__|"
    r"TorchFunctionMode|TorchDispatchMode|DisableTorchFunction|_python_dispatch|sys\.modules|"
    r"__builtins__|\bbuiltins\b|__import__|importlib"
)


def integrity_flags(released: Path, submitted: Path, source: Path | None = None) -> list[str]:
    """Graded cells that a submission deleted or whose locked source it edited.

    A locked cell may match either the release or the instructor's source (which still holds
    the hidden tests, as when an instructor submits the solution to check the pipeline).
    """
    try:
        theirs = _nbgrader_cells(submitted)
    except Exception as error:  # an unreadable notebook is reported, not fatal to the batch
        return [f"unreadable notebook ({type(error).__name__}: {error})"]
    originals = _nbgrader_cells(source) if source is not None and source.exists() else {}
    deleted: dict[str, list[str]] = {"test": [], "answer": []}
    edited = []
    for grade_id, cell in _nbgrader_cells(released).items():
        meta = cell.metadata["nbgrader"]
        if grade_id not in theirs:
            deleted["test" if is_test_cell(cell) else "answer"].append(grade_id)
        elif meta.get("locked") and theirs[grade_id].source not in (cell.source, getattr(originals.get(grade_id), "source", None)):
            edited.append(grade_id)
    flags = [f"deleted {kind} cell(s) {', '.join(ids)} (they score 0; review by hand)" for kind, ids in deleted.items() if ids]
    tampering = [
        grade_id for grade_id, cell in theirs.items()
        if is_answer_cell(cell) and TAMPERING.search(cell.source)
    ]
    if tampering:
        flags.append(f"answer cell(s) {', '.join(tampering)} touch the grading machinery (review by hand)")
    if edited:
        flags.append(f"edited test cell(s) {', '.join(edited)} (restored from the release before grading)")
    return flags




def protected_names(released: Path) -> dict[str, str | None]:
    """The names the released notebook's own cells import or define, minus the answers' stubs."""
    nb = nbformat.read(released, as_version=4)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    stubs = notebook_definitions(c.source for c in code_cells if is_answer_cell(c))
    own = notebook_definitions(c.source for c in code_cells if not is_answer_cell(c))
    return {name: dotted for name, dotted in own.items() if name not in stubs}


def make_writable(path: Path) -> None:
    for p in [path, *path.rglob("*")] if path.exists() else []:
        p.chmod(0o755 if p.is_dir() else 0o644)


def stage_submission(root: Path, lesson: str, student: str,
                     protected: dict[str, dict[str, str | None]] | None = None, enforce_policy: bool = True) -> list[str]:
    """Copy a submission into the staging area, withhold the cells the learner wrote or added
    that break the policy (answers, and cells without the release's nbgrader metadata), and
    make the copy read-only. Returns the flags to report. `protected` maps a notebook's name to
    its `protected_names` (computed here when not given). `enforce_policy=False` is for tests
    that prove the other layers hold by themselves."""
    course = Course(root)
    source_dir, staged_dir = course.submitted(student, lesson), course.staged(student, lesson)
    make_writable(staged_dir)
    shutil.rmtree(staged_dir, ignore_errors=True)
    shutil.copytree(source_dir, staged_dir, symlinks=False, ignore_dangling_symlinks=True)
    flags = []
    for notebook in sorted(staged_dir.glob("*.ipynb")):
        released = course.released(lesson) / notebook.name
        try:
            nb = nbformat.read(notebook, as_version=4)
        except Exception:  # reported by integrity_flags
            continue
        if protected is None or notebook.name not in protected:
            names = protected_names(released) if released.exists() else {}
        else:
            names = protected[notebook.name]
        changed = False
        released_cells = nbformat.read(released, as_version=4).cells if released.exists() else []
        released_ids = {nbgrader_meta(c).get("grade_id") for c in released_cells}
        released_sources = [c.source for c in released_cells if c.cell_type == "code" and not is_answer_cell(c)]
        seen, foreign = set(), []
        for index, cell in enumerate(nb.cells):  # nbgrader metadata the release does not have: an added cell
            grade_id = nbgrader_meta(cell).get("grade_id")
            if grade_id is not None and (grade_id not in released_ids or grade_id in seen):
                del cell.metadata["nbgrader"]
                foreign.append(f"cell {index} ({grade_id!r})")
                changed = True
            seen.add(grade_id)
        if foreign:
            flags.append(f"cell(s) carrying nbgrader metadata that the release does not have, graded as added cells: "
                         f"{', '.join(foreign[:5])}")
        findings = policy_violations(nb, names, released_sources) if enforce_policy else []
        if findings:
            withhold(nb, findings)
            changed = True
            withheld = [f"{label} ({'; '.join(str(v) for v in violations[:4])})" for _, label, violations in findings]
            flags.append(f"answer(s) withheld by the grading policy, scored 0, review by hand: {', '.join(withheld)}")
        if changed:
            nbformat.write(nb, notebook)
    for p in [*staged_dir.rglob("*"), staged_dir]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    return flags
