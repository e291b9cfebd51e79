"""tests/notebooks/budget.py: the notebook that runs past its nbval budget fails at the cell that crosses it."""

from __future__ import annotations

from types import SimpleNamespace

from tests.notebooks.budget import NotebookBudget


def _report(nodeid, duration):
    return SimpleNamespace(nodeid=nodeid, duration=duration, outcome="passed", longrepr=None,
                           failed=False)


def test_the_cell_that_crosses_the_budget_fails_and_only_it():
    budget = NotebookBudget(budget_s=10)
    reports = [_report("solutions/a/a.ipynb::Cell 0", 6), _report("solutions/b/b.ipynb::Cell 0", 9),
               _report("tests/unit/test_x.py::test_y", 50), _report("solutions/a/a.ipynb::Cell 1", 5),
               _report("solutions/a/a.ipynb::Cell 2", 1)]
    for report in reports:
        budget.charge(report)
    assert [r.outcome for r in reports] == ["passed", "passed", "passed", "failed", "passed"]
    assert "solutions/a/a.ipynb has run 11 s under nbval, over its budget of 10 s" in reports[3].longrepr
    assert budget.spent == {"solutions/a/a.ipynb": 12, "solutions/b/b.ipynb": 9}
