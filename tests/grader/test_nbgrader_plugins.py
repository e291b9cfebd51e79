"""grader/nbgrader_plugins.py: a test cell is scored by its error, never by what went to stderr."""

from __future__ import annotations


def test_a_score_test_cells_by_its_error_never_by_what_the_answer_wrote_to_stderr():
    """nbgrader scores 0 for any stderr output; the course scores a warning, a log line or a print
    to stderr as nothing, an error as 0, and reads no partial credit from a cell's last value."""
    from nbformat.v4 import new_code_cell, new_output

    from grader.nbgrader_plugins import score_test_cell

    def cell(*outputs):
        return new_code_cell("...", metadata={"nbgrader": {"grade": True, "grade_id": "t", "points": 2}},
                             outputs=list(outputs))

    stderr = new_output("stream", name="stderr", text="UserWarning: float64 input\n")
    assert score_test_cell(cell(stderr, new_output("stream", name="stdout", text="passed\n"))) == 2.0
    assert score_test_cell(cell(new_output("execute_result", data={"text/plain": "0.5"}, execution_count=1))) == 2.0
    error = new_output("error", ename="AssertionError", evalue="wrong", traceback=[])
    assert score_test_cell(cell(stderr, error)) == 0.0
    assert score_test_cell(cell()) == 2.0
