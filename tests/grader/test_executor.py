"""grader/executor.py: graded test cells are announced to the kernel, and a hidden test cell
leaves nothing a later cell can read back (the kernel's history, linecache)."""

from __future__ import annotations

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from course_lib.grading import RECORD_ENV
from grader.executor import announcing_client
from grader.records import read_records


def _graded(source: str, grade_id: str) -> nbformat.NotebookNode:
    cell = new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": grade_id, "points": 1}
    return cell


def _run_by_nbgrader(nb, path):
    """As the grader runs it: nbgrader's Execute (its preprocess_cell calls execute_cell)."""
    from grader.nbgrader_plugins import ExecuteAnnouncingTestCells

    ExecuteAnnouncingTestCells(timeout=120, kernel_name="python3").preprocess(nb, {"metadata": {"path": path}})


def _run_by_client(nb, path):
    """As the reference run and make execute-solutions run it (NotebookClient.execute)."""
    announcing_client(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": path}}).execute()


@pytest.mark.parametrize("run", [_run_by_nbgrader, _run_by_client])
def test_test_cells_are_announced_and_hidden_ones_leave_no_source_behind(run, tmp_path, monkeypatch):
    monkeypatch.setenv(RECORD_ENV, str(tmp_path / "records"))
    nb = new_notebook(cells=[
        new_code_cell("from course_lib.grading import assert_equal\nSECRET_IN_A_DEMO = 1"),
        _graded("assert_equal(1 + 1, expect=lambda: 2, name='the visible test')", "visible"),
        _graded("### BEGIN HIDDEN TESTS\nassert_equal(2 + 2, expect=lambda: 4, name='the hidden test')\n### END HIDDEN TESTS", "hidden"),
        new_code_cell(
            "import json, linecache\n"
            "needle = 'the hid' + 'den test'  # not itself in this cell's source\n"
            "cached = [''.join(v[2]) for v in linecache.cache.values() if isinstance(v, tuple) and len(v) > 2]\n"
            "print(json.dumps({'linecache': any(needle in s for s in cached),\n"
            "                  'history': any(needle in s for s in In),\n"
            "                  'demo_in_history': any('SECRET_IN_A_DEMO' in s for s in In)}))"),
    ])
    run(nb, str(tmp_path))
    cells = [record["cell"] for record in read_records(tmp_path / "records")]
    assert cells == ["visible", "hidden"], f"the checks were recorded under {cells}"
    seen = json.loads(nb.cells[3].outputs[0]["text"])
    assert seen == {"linecache": False, "history": False, "demo_in_history": True}, seen


def test_a_channel_polls_in_slices_until_its_timeout_and_returns_a_message_at_once():
    import asyncio
    from queue import Empty

    from grader.executor import POLL_SLICE_S, poll_in_slices

    class Channel:
        """A kernel channel whose message arrives at its fourth poll."""

        def __init__(self, arrives_at=None):
            self.polls, self.arrives_at = [], arrives_at

        async def get_msg(self, timeout=None):
            self.polls.append(timeout)
            if len(self.polls) == self.arrives_at:
                return {"msg": "reply"}
            await asyncio.sleep(min(timeout, 0.01))  # a poll that sleeps through its whole slice, fast
            raise Empty

    late = Channel(arrives_at=4)
    poll_in_slices(late)
    poll_in_slices(late)  # idempotent
    assert asyncio.run(late.get_msg(timeout=120)) == {"msg": "reply"}
    assert late.polls == [POLL_SLICE_S] * 4, f"a 120 s wait must poll in slices of {POLL_SLICE_S} s, polled {late.polls}"
    never = Channel()
    poll_in_slices(never)
    with pytest.raises(Empty):
        asyncio.run(never.get_msg(timeout=0.05))
    assert never.polls, "the channel was never polled"
    assert all(t <= 0.05 for t in never.polls), f"a short timeout is kept, polled {never.polls}"
