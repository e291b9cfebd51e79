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


def test_each_stub_of_a_released_notebook_names_its_exercise_and_function():
    """NameUnwrittenExercises: `raise NotImplementedError()` becomes a one-line message with the
    last "Exercise N" heading above it and the def/class it sits in; other lines stay as they are."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    from course_lib.grading_env import UNWRITTEN
    from grader.nbgrader_plugins import NameUnwrittenExercises

    answer = {"nbgrader": {"solution": True, "grade": False, "grade_id": "a", "locked": False}}
    nb = new_notebook(cells=[
        new_markdown_cell("## 3. Exercise: softmax"),
        new_code_cell("def softmax(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()", metadata=answer),
        new_markdown_cell("### Exercise 2: a block (2 points)\n\nText."),
        new_code_cell("class Block:\n    def __init__(self):\n        raise NotImplementedError()\n\n"
                      "    def forward(self, x):\n        y = x\n        raise NotImplementedError()",
                      metadata=answer),
        new_code_cell("raise NotImplementedError()"),  # not an answer cell
    ])
    nb, _ = NameUnwrittenExercises().preprocess(nb, {})
    first, second = nb.cells[1].source.splitlines(), nb.cells[3].source.splitlines()
    assert first[2] == ('    raise NotImplementedError("This exercise (`softmax`) is not written yet: replace '
                        'this line with your code, run this cell, then its test cell.")')
    assert second[2].startswith('        raise NotImplementedError("Exercise 2 (`Block.__init__`) ' + UNWRITTEN)
    assert second[5] == "        y = x"
    assert second[6].startswith('        raise NotImplementedError("Exercise 2 (`Block.forward`) ' + UNWRITTEN)
    assert nb.cells[4].source == "raise NotImplementedError()", "only answer cells change"
    for line in (first[2], second[2], second[6]):
        compile(line.strip(), "stub", "exec")  # valid Python
