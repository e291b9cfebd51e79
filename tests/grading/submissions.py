"""Submissions for the grading round trip: honest, untouched, and ones that cheat or break."""

from __future__ import annotations

import copy
import textwrap

import nbformat

# Answers that call the reference a lesson asks learners to write. Visible tests do not
# forbid it, hidden tests do: such a submission may earn the visible points, never the hidden ones.
FORBIDDEN_ANSWERS: dict[str, dict[str, str]] = {
    "00_setup": {
        "softmax_answer": """
            def stable_softmax(x, dim=-1):
                return torch.softmax(x, dim=dim)
        """,
        "cross_entropy_answer": """
            def cross_entropy(logits, targets):
                return torch.nn.functional.cross_entropy(logits, targets)
        """,
    },
}

NEVER_FINISHES = textwrap.dedent("""
    import signal, time
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            time.sleep(0.01)
        except BaseException:
            pass
""")


def meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def is_test_cell(cell) -> bool:
    return bool(meta(cell).get("grade")) and not meta(cell).get("solution") and cell.cell_type == "code"


def is_hidden_test_cell(cell) -> bool:
    return is_test_cell(cell) and "### BEGIN HIDDEN TESTS" in cell.source


def answer_cells(nb) -> list:
    return [c for c in nb.cells if meta(c).get("solution") and c.cell_type == "code"]


def points(nb, which) -> float:
    return float(sum(meta(c)["points"] for c in nb.cells if which(c)))


def with_edited_tests(student_nb):
    """The untouched student version with every test cell replaced by `pass`."""
    nb = copy.deepcopy(student_nb)
    for cell in nb.cells:
        if is_test_cell(cell):
            cell.source = "pass  # tests removed"
    return nb


def with_hidden_tests_deleted(solution_nb):
    nb = copy.deepcopy(solution_nb)
    nb.cells = [c for c in nb.cells if not is_hidden_test_cell(c)]
    return nb


def with_forbidden_answers(student_nb, answers: dict[str, str]):
    nb = copy.deepcopy(student_nb)
    for cell in answer_cells(nb):
        cell.source = textwrap.dedent(answers[meta(cell)["grade_id"]]).strip()
    return nb


def never_finishing(solution_nb):
    """The solution, with a loop that ignores SIGINT and catches BaseException in its first answer."""
    nb = copy.deepcopy(solution_nb)
    first = answer_cells(nb)[0]
    first.source = first.source + "\n" + NEVER_FINISHES
    return nb


def write(nb, path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, path)
