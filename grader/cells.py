"""Reading nbgrader's cell metadata (cells from nbformat or plain JSON dicts), and the markers
and names that the grader, nbgrader's configuration and the authoring tools share."""

from __future__ import annotations

from pathlib import Path

HIDDEN_TESTS_MARKER = "### BEGIN HIDDEN TESTS"
END_HIDDEN_TESTS_MARKER = "### END HIDDEN TESTS"
#: The marker text without its comment sign, as RedactFeedback and the answer policy look for it.
MARKER_WORDS = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def lesson_names(root: str | Path) -> list[str]:
    """The lessons of a course: the folders of solutions/, in order."""
    return sorted(p.name for p in (Path(root) / "solutions").iterdir() if p.is_dir())


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def cell_source(cell) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def is_test_cell(cell) -> bool:
    """A graded code cell that is not an answer: a visible or hidden test."""
    meta = nbgrader_meta(cell)
    return cell["cell_type"] == "code" and bool(meta.get("grade")) and not meta.get("solution")


def is_hidden_test_cell(cell) -> bool:
    return is_test_cell(cell) and HIDDEN_TESTS_MARKER in cell_source(cell)


def is_answer_cell(cell) -> bool:
    """An autograded answer (code); written answers are markdown solution cells."""
    return cell["cell_type"] == "code" and bool(nbgrader_meta(cell).get("solution"))


def is_written_answer(cell) -> bool:
    meta = nbgrader_meta(cell)
    return cell["cell_type"] == "markdown" and bool(meta.get("grade")) and bool(meta.get("solution"))
