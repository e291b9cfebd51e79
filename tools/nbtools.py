"""Authoring helpers for solution notebooks: cells with the nbgrader metadata filled in.

A maintainer script (or an interactive session) builds a lesson as a list of cells:

    from tools.nbtools import md, code, answer, tests, written, write_notebook
    write_notebook("solutions/00_setup/00_setup.ipynb", [md("# Title"), answer("ex1", "..."), ...])

then `make execute-solutions` stores the outputs that nbval compares, and `make release`
generates the student version. The notebooks themselves are the source of truth.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat

SCHEMA = 3


def _source(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def _meta(grade_id: str, *, grade: bool, solution: bool, locked: bool, points: float | None = None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA, "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def md(text: str):
    return nbformat.v4.new_markdown_cell(_source(text))


def code(text: str):
    return nbformat.v4.new_code_cell(_source(text))


def answer(grade_id: str, text: str):
    """An autograded answer cell: put the solution between ### BEGIN SOLUTION / ### END SOLUTION."""
    source = _source(text)
    if "### BEGIN SOLUTION" not in source:
        raise ValueError(f"answer cell {grade_id!r} has no ### BEGIN SOLUTION region")
    cell = nbformat.v4.new_code_cell(source, metadata=_meta(grade_id, grade=False, solution=True, locked=False))
    cell.id = grade_id
    return cell


def tests(grade_id: str, points: float, text: str):
    """A locked, graded test cell. Hidden tests go between ### BEGIN HIDDEN TESTS / ### END HIDDEN TESTS."""
    cell = nbformat.v4.new_code_cell(_source(text), metadata=_meta(grade_id, grade=True, solution=False, locked=True, points=points))
    cell.id = grade_id
    return cell


def written(grade_id: str, points: float, model_answer: str):
    """A markdown answer graded by hand; the model answer is replaced in the student version."""
    cell = nbformat.v4.new_markdown_cell(_source(model_answer), metadata=_meta(grade_id, grade=True, solution=True, locked=False, points=points))
    cell.id = grade_id
    return cell


def write_notebook(path: str | Path, cells: list) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    for i, cell in enumerate(nb.cells):
        if "nbgrader" not in cell.metadata:
            cell.id = f"cell-{i:03d}"
    nb.metadata = {
        "kernelspec": {"display_name": "LLM internals (.venv)", "language": "python", "name": "llm-course"},
        "language_info": {"name": "python"},
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return path
