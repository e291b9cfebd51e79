"""nbgrader preprocessors of the course, named in nbgrader_config.py (which is configuration only).

- `TagTestCellsRaisesException` (release): "Run All" goes on past an unanswered exercise.
- `ExecuteAnnouncingTestCells` (autograde): tells the kernel which graded test cell comes next,
  so that its recorded checks can be matched with the instructor's run (grader/verdicts.py).
- `RedactFeedback` (feedback): no hidden-test text in what a learner sees.
"""

from __future__ import annotations

from nbclient.util import run_sync
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor

from grader.cells import MARKER_WORDS


class TagTestCellsRaisesException(NbGraderPreprocessor):
    """Released notebooks only: test cells get JupyterLab's `raises-exception` tag, so that
    "Run All" goes on past the visible test of an unanswered exercise and the demos and widgets
    below it still run. The solutions stay untagged, so nbval still fails on any error there;
    autograde runs every cell whatever the tags, and the tag is not part of nbgrader's checksum.
    The solutions' saved widget state (the rendered widgets of the last execution) is dropped:
    a fresh student notebook has no outputs for it to belong to."""

    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            tags = cell.metadata.setdefault("tags", [])
            if "raises-exception" not in tags:
                tags.append("raises-exception")
        return cell, resources

class RedactFeedback(NbGraderPreprocessor):
    """Feedback shows a learner nothing of the hidden tests. Runs before ClearHiddenTests.

    - A hidden test cell keeps only its verdict: each error becomes `ename: evalue` (the
      messages are written to be shown), and its printed output is dropped; the traceback
      would show the hidden code, inputs and forbid lists.
    - Any other output that contains a line of hidden-test code (printed by an answer, say) is
      withheld.
    - Hidden-test marker comments outside the hidden test cells are neutralised, so an answer
      cannot make ClearHiddenTests fail (two BEGIN lines) or cut its own cell apart.
    """

    MARKERS = MARKER_WORDS
    WITHHELD = "[output withheld by the grader: it contained hidden-test code]"

    def preprocess(self, nb, resources):
        hidden_cells = [c for c in nb.cells if c.cell_type == "code" and self.MARKERS[0] in c.source
                        and c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")]
        hidden_lines = set()
        for cell in hidden_cells:
            region = cell.source.split(self.MARKERS[0], 1)[1].split(self.MARKERS[1], 1)[0]
            hidden_lines |= {line.strip() for line in region.splitlines() if len(line.strip()) >= 12}
        hidden_ids = {id(cell) for cell in hidden_cells}
        for cell in nb.cells:
            if id(cell) in hidden_ids:
                cell.outputs = [self._verdict(o) for o in cell.get("outputs", []) if o.output_type == "error"]
                continue
            for marker in self.MARKERS:
                cell.source = cell.source.replace(marker, marker.replace("HIDDEN TESTS", "(marker removed)"))
            if cell.cell_type == "code" and hidden_lines:
                cell.outputs = [self._screened(o, hidden_lines) for o in cell.get("outputs", [])]
        return nb, resources

    @staticmethod
    def _verdict(output):
        output.traceback = [f"{output.ename}: {output.evalue}"]
        return output

    @classmethod
    def _screened(cls, output, hidden_lines):
        texts = [output.get("text", ""), output.get("evalue", ""), *output.get("traceback", [])]
        texts += [v for v in output.get("data", {}).values() if isinstance(v, str)]
        shown = "\n".join(t if isinstance(t, str) else "".join(t) for t in texts)
        if any(line in shown for line in hidden_lines):
            return NotebookNode(output_type="stream", name="stdout", text=cls.WITHHELD)
        return output


class ExecuteAnnouncingTestCells(Execute):
    """nbgrader's Execute, which first tells the kernel which graded test cell comes next
    (`course_lib.grading.begin_checks`), so that the checks recorded while grading can be
    matched, cell by cell, with the instructor's run (grader/verdicts.py). The announcement is a
    silent execution outside the notebook: no cell, no output, no execution count."""

    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            run_sync(self._announce)(meta["grade_id"])
        return super().preprocess_cell(cell, resources, index)

    async def _announce(self, grade_id):
        from course_lib.grading import announcement

        msg_id = self.kc.execute(announcement(grade_id), silent=True, store_history=False)  # no output, no count
        await self.async_wait_for_reply(msg_id)
