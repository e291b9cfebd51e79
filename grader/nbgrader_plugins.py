"""nbgrader preprocessors of the course, named in nbgrader_config.py (which is configuration only).

- `TagTestCellsRaisesException` (release): "Run All" goes on past an unanswered exercise.
- `NameUnwrittenExercises` (release): an unanswered exercise's stub says which exercise it is.
- `ExecuteAnnouncingTestCells` (autograde): nbgrader's Execute, running the graded test cells as
  grader/executor.py says (announced, hidden ones outside the kernel's history).
- `ScoreTestCellsByErrors` (autograde): a test cell scores 0 only when it raised; what the answer
  wrote to stderr (a warning, a log line) is shown, never scored.
- `RequireCourseGrader` (autograde): plain `nbgrader autograde`, and the Formgrader's button,
  refuse to grade and name `make autograde`.
- `RedactFeedback` (feedback): no hidden-test text in what a learner sees.
"""

from __future__ import annotations

import os
import re

from nbformat import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor, SaveAutoGrades

from course_lib.grading_env import UNWRITTEN
from grader.cells import MARKER_WORDS
from grader.executor import AnnouncesTestCells

#: Set by grader/processes.py in the environment of the nbgrader it runs (RequireCourseGrader).
GRADER_RUN_ENV = "COURSE_GRADER_RUN"


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


#: nbgrader's stub for a cleared answer (ClearSolutions.code_stub, python).
STUB = "raise NotImplementedError()"
_EXERCISE = re.compile(r"^#+ .*?\bExercise (\d+)\b", re.MULTILINE)
_DEFINITION = re.compile(r"^(\s*)(?:def|class) (\w+)")


def unwritten_stub(exercise: str | None, name: str | None, indent: str) -> str:
    """The stub line of an answer region: which exercise, and what to do."""
    what = f"Exercise {exercise}" if exercise else "This exercise"
    if name:
        what += f" (`{name}`)"
    return (f'{indent}raise NotImplementedError("{what} {UNWRITTEN}: replace this line with your code, '
            'run this cell, then its test cell.")')


def _enclosing_definition(lines: list[str], index: int) -> str | None:
    """The dotted name of the function or class the line `index` sits in (`MiniGPT.forward`)."""
    depth, names = len(lines[index]) - len(lines[index].lstrip()), []
    for line in reversed(lines[:index]):
        match = _DEFINITION.match(line)
        if match and len(match.group(1)) < depth:
            names.append(match.group(2))
            depth = len(match.group(1))
    return ".".join(reversed(names)) or None


class NameUnwrittenExercises(NbGraderPreprocessor):
    """Released notebooks only, after ClearSolutions: each stub `raise NotImplementedError()` says
    which exercise it belongs to (the last "Exercise N" heading above it) and its function, so
    that an untouched exercise's first failure line says what to do, not a traceback."""

    def preprocess(self, nb, resources):
        exercise = None
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                numbers = _EXERCISE.findall(cell.source)
                exercise = numbers[-1] if numbers else exercise
            elif cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                lines = cell.source.split("\n")
                for i, line in enumerate(lines):
                    if line.strip() == STUB:
                        indent = line[:len(line) - len(line.lstrip())]
                        lines[i] = unwritten_stub(exercise, _enclosing_definition(lines, i), indent)
                cell.source = "\n".join(lines)
        return nb, resources


def score_test_cell(cell: NotebookNode) -> float:
    """A graded test cell's score before the grader's replay (grader/verdicts.py): 0 if it
    raised, else its points. nbgrader's own rule also gives 0 to a cell that wrote to stderr,
    which costs an honest answer its points for a `warnings.warn` or a log line, and it reads
    partial credit from the cell's last value, which a test cell never states."""
    points = float(cell.metadata["nbgrader"].get("points", 0) or 0)
    return 0.0 if any(o.get("output_type") == "error" for o in cell.get("outputs", [])) else points


class ScoreTestCellsByErrors(SaveAutoGrades):
    """nbgrader's SaveAutoGrades, with `score_test_cell` for code cells (written answers keep
    nbgrader's rule: no score until graded by hand)."""

    def _add_score(self, cell, resources):
        if cell.cell_type != "code":
            return super()._add_score(cell, resources)
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                          self.assignment_id, self.student_id)
        grade.auto_score = score_test_cell(cell)
        grade.needs_manual_grade = grade.manual_score is not None
        self.gradebook.db.commit()


class RequireCourseGrader(NbGraderPreprocessor):
    """First of the autograde preprocessors: nbgrader run by anything but the course's grader
    (plain `nbgrader autograde`, the Formgrader's "Autograde" button) would execute a submission
    with no sandbox, no answer policy and no verdicts outside the kernel. It refuses, before any
    cell runs, and says what to run instead. grader/processes.py sets GRADER_RUN_ENV for the
    nbgrader it starts."""

    MESSAGE = ("this course grades only through its own grader, which sandboxes each submission and "
               "judges its checks outside the kernel: run `make autograde` (or `python -m grader "
               "autograde LESSON`) in the course folder. Plain `nbgrader autograde` and the "
               "Formgrader's Autograde button are turned off for this course (nbgrader_config.py).")

    def preprocess(self, nb, resources):
        if os.environ.get(GRADER_RUN_ENV) != "1":
            raise RuntimeError(self.MESSAGE)
        return nb, resources


class RedactFeedback(NbGraderPreprocessor):
    """Feedback shows a learner nothing of the hidden tests. Runs before ClearHiddenTests.

    - A hidden test cell keeps only its verdict: each error becomes `ename: evalue` (the
      messages are written to be shown), and its printed output is dropped; the traceback
      would show the hidden code, inputs and forbid lists. A message that contains a line of
      hidden-test code (an answer's exception can carry any text) is withheld, and a message is
      cut at MESSAGE_CHARS.
    - Any other output that contains a line of hidden-test code (printed by an answer, say) is
      withheld.
    - Hidden-test marker comments outside the hidden test cells are neutralised, so an answer
      cannot make ClearHiddenTests fail (two BEGIN lines) or cut its own cell apart.
    """

    MARKERS = MARKER_WORDS
    WITHHELD = "[output withheld by the grader: it contained hidden-test code]"
    MESSAGE_WITHHELD = "[message withheld by the grader: it contained hidden-test code]"
    MESSAGE_CHARS = 2000

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
                cell.outputs = [self._verdict(o, hidden_lines) for o in cell.get("outputs", []) if o.output_type == "error"]
                continue
            for marker in self.MARKERS:
                cell.source = cell.source.replace(marker, marker.replace("HIDDEN TESTS", "(marker removed)"))
            if cell.cell_type == "code" and hidden_lines:
                cell.outputs = [self._screened(o, hidden_lines) for o in cell.get("outputs", [])]
        return nb, resources

    @classmethod
    def _verdict(cls, output, hidden_lines):
        evalue = str(output.get("evalue", ""))
        if any(line in evalue for line in hidden_lines):
            evalue = cls.MESSAGE_WITHHELD
        elif len(evalue) > cls.MESSAGE_CHARS:
            evalue = evalue[:cls.MESSAGE_CHARS] + " [...]"
        output.evalue = evalue
        output.traceback = [f"{output.ename}: {evalue}"]
        return output

    @classmethod
    def _screened(cls, output, hidden_lines):
        texts = [output.get("text", ""), output.get("evalue", ""), *output.get("traceback", [])]
        texts += [v for v in output.get("data", {}).values() if isinstance(v, str)]
        shown = "\n".join(t if isinstance(t, str) else "".join(t) for t in texts)
        if any(line in shown for line in hidden_lines):
            return NotebookNode(output_type="stream", name="stdout", text=cls.WITHHELD)
        return output


class ExecuteAnnouncingTestCells(AnnouncesTestCells, Execute):
    """nbgrader's Execute, executing graded test cells as grader/executor.py says."""
