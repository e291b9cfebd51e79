"""The one way the course executes a notebook's graded test cells, in a Jupyter kernel: for the
grader (nbgrader's Execute, `nbgrader_plugins.ExecuteAnnouncingTestCells`), the instructor's
reference run and `make execute-solutions` (`announcing_client`). Without Jupyter,
tools/run_as_script.py announces test cells with the same `course_lib.grading.announcement`.

Before a graded test cell runs, the kernel is told which cell comes next
(`course_lib.grading.begin_checks`), so that the checks it records can be matched, cell by cell,
with the instructor's run (grader/verdicts.py). The announcement is a silent execution outside the
notebook: no cell, no output, no execution count.

A test cell with hidden tests runs outside the kernel's input history (no `In`, `_ih`, `_i`
entry, nothing in the history database), and its source is then dropped from `linecache`, so no
later cell can read the hidden tests back from the kernel.

Every wait on the kernel's shell and IOPub channels polls at most `POLL_SLICE_S` at a time: a long
asyncio poll on a ZeroMQ socket can sleep through a message that has already arrived (its file
descriptor is edge-triggered), and a graded cell then waited out the whole per-cell timeout (120 s)
after its kernel had replied. A fresh poll checks the socket's pending events first."""

from __future__ import annotations

import time
from queue import Empty

from nbclient.util import run_sync

from course_lib.grading import announcement
from grader.cells import MARKER_WORDS, is_test_cell, nbgrader_meta

# Run silently after each hidden test cell: IPython keeps every cell's source in `linecache` (for
# tracebacks), where a later cell could read the hidden tests back. The scrub's own source holds
# the marker too, so it removes itself.
POLL_SLICE_S = 1.0

SCRUB_HIDDEN_SOURCE = (
    "[__import__('linecache').cache.pop(k, None) for k, v in list(__import__('linecache').cache.items()) "
    "if isinstance(v, tuple) and len(v) > 2 and isinstance(v[2], list) "
    f"and any({MARKER_WORDS[0]!r} in str(line) for line in v[2])]"
)


class AnnouncesTestCells:
    """A mixin for nbclient's NotebookClient and its subclasses (nbconvert's and nbgrader's
    Execute): announces each graded test cell, and runs a hidden one outside the history."""

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        for channel in (self.kc.shell_channel, self.kc.iopub_channel):
            poll_in_slices(channel)
        if not is_test_cell(cell):
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        await self._silently(announcement(nbgrader_meta(cell)["grade_id"]))
        if MARKER_WORDS[0] not in cell.source:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        cell = await super().async_execute_cell(cell, cell_index, execution_count, store_history=False)
        await self._silently(SCRUB_HIDDEN_SOURCE)
        return cell

    # nbclient binds `execute_cell` to its own coroutine, past any override; nbconvert's and
    # nbgrader's preprocess_cell call it.
    execute_cell = run_sync(async_execute_cell)

    #: The instructor's runs stop if an announcement fails. While grading, a submission that breaks
    #: it is judged by the replay: its checks are missing from the cell, or recorded under another.
    strict_announcements = False

    async def _silently(self, code: str) -> None:
        msg_id = self.kc.execute(code, silent=True, store_history=False)  # no output, no count
        reply = await self.async_wait_for_reply(msg_id)
        if self.strict_announcements and (reply is None or reply["content"]["status"] != "ok"):
            raise RuntimeError(f"a silent execution in the kernel failed ({code[:60]}...): "
                               f"{reply and reply['content'].get('ename')}")


def poll_in_slices(channel) -> None:
    """Make a kernel client channel's `get_msg(timeout)` poll at most POLL_SLICE_S at a time,
    until its timeout (or forever, for None), as its own get_msg would. Idempotent."""
    get_msg = channel.get_msg
    if getattr(get_msg, "sliced", False):
        return

    async def sliced(timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SLICE_S if deadline is None else min(POLL_SLICE_S, max(0.0, deadline - time.monotonic()))
            try:
                return await get_msg(timeout=left)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    sliced.sliced = True
    channel.get_msg = sliced


def announcing_client(nb, **kwargs):
    """An nbclient NotebookClient that executes graded test cells as the grader does."""
    from nbclient import NotebookClient

    class AnnouncingClient(AnnouncesTestCells, NotebookClient):
        strict_announcements = True

    return AnnouncingClient(nb, **kwargs)
