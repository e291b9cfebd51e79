"""The time budget of one notebook under nbval: a notebook whose cells take more than
NBVAL_BUDGET_S in all (setup, call and teardown, as the worker that runs it measures them) fails
the cell that crosses it. The root conftest.py charges every report to its notebook."""

from __future__ import annotations

NBVAL_BUDGET_S = 300.0


class NotebookBudget:
    def __init__(self, budget_s: float = NBVAL_BUDGET_S):
        self.budget_s = budget_s
        self.spent: dict[str, float] = {}
        self.active = True  # False where reports are only relayed (xdist's controller)

    def charge(self, report) -> None:
        """Add a test report's duration to its notebook; the report that crosses the budget fails."""
        path = report.nodeid.split("::")[0]
        if not self.active or not path.endswith(".ipynb"):
            return
        before = self.spent.get(path, 0.0)
        self.spent[path] = before + report.duration
        if before <= self.budget_s < self.spent[path] and not report.failed:
            report.outcome = "failed"
            report.longrepr = (
                f"{path} has run {self.spent[path]:.0f} s under nbval, over its budget of {self.budget_s:.0f} s: "
                "make its demos shorter there (COURSE_NBVAL=1, as lesson 10's live trainings) or move the "
                "work into a test")
