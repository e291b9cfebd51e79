"""What a graded test cell runs while grading (grader/graded_source.py): the learner's process
computes and holds no expected value, and everything else the test does still runs."""

import ast
import json
from pathlib import Path

import pytest

from course_lib import grading
from grader.cells import is_test_cell, lesson_names, nbgrader_meta
from grader.graded_source import CHECKS, graded_sources, learner_code, notebook_sources
from grader.records import read_records

ROOT = Path(__file__).resolve().parents[2]


def _cell(source, **meta):
    cell = {"cell_type": "code", "source": source, "metadata": {}, "outputs": [], "execution_count": None}
    if meta:
        cell["metadata"]["nbgrader"] = meta
    return cell


def _notebook(answer, *tests, provided="import torch\n"):
    cells = [_cell(provided), _cell(answer, solution=True, grade=False, grade_id="answer")]
    cells += [_cell(source, grade=True, solution=False, grade_id=f"test{i}", points=1) for i, source in enumerate(tests)]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


ANSWER = "def double(x):\n    return 2 * x\n"


class Reference:
    """A reference implementation that counts its calls: none may happen while grading."""

    calls = 0

    @classmethod
    def double(cls, x):
        cls.calls += 1
        return 2 * x


@pytest.fixture
def recording(tmp_path, monkeypatch):
    monkeypatch.setenv(grading.RECORD_ENV, str(tmp_path))
    monkeypatch.setattr(grading, "_recorder", None)
    Reference.calls = 0
    yield tmp_path
    monkeypatch.setattr(grading, "_recorder", None)


def _run(nb, mode, grade_id="test0", namespace=None):
    namespace = namespace if namespace is not None else {}
    exec(nb["cells"][0]["source"] + nb["cells"][1]["source"], namespace)  # noqa: S102
    namespace.update(ref=Reference, assert_tensor_close=grading.assert_tensor_close,
                     assert_equal=grading.assert_equal, assert_shape=grading.assert_shape)
    grading.begin_checks(grade_id)
    exec(graded_sources(nb, mode)[grade_id], namespace)  # noqa: S102
    return namespace


TEST = """
x = torch.arange(4.0)
expected = ref.double(x)
got = double(x)
assert_tensor_close(got, expected, name=f"double(x), whose answer is {expected.tolist()}")
assert_shape(got, tuple(expected.shape))
"""


def test_grading_runs_the_answer_and_records_it_without_computing_the_expected_value(recording):
    nb = _notebook(ANSWER, TEST)
    source = graded_sources(nb, "grading")["test0"]
    assert "ref.double" not in source, source
    assert "expected" not in source, source
    _run(nb, "grading")
    assert Reference.calls == 0, "the reference ran in the learner's process"
    inputs, close, shape = read_records(recording)
    assert inputs["kind"] == "inputs"
    assert inputs["actual"] == "double"
    assert close["expected"] is grading.WITHHELD
    assert shape["expected"] is grading.WITHHELD
    assert close["actual"].tolist() == [0.0, 2.0, 4.0, 6.0]
    assert close["options"] == {"rtol": 1e-5, "atol": 1e-6, "name": "output", "hint": None, "check_dtype": True}, \
        "no name or hint from the kernel: the grader words failures with the instructor's run's"


def test_the_instructors_run_keeps_its_expected_values_and_records_the_same_inputs(recording, tmp_path):
    nb = _notebook(ANSWER, TEST)
    _run(nb, "reference")
    assert Reference.calls == 1
    inputs, close, shape = read_records(recording)
    assert close["expected"].tolist() == [0.0, 2.0, 4.0, 6.0]
    assert close["options"]["name"] == "double(x), whose answer is [0.0, 2.0, 4.0, 6.0]"
    assert shape["expected"] == [4]
    reference_inputs = inputs["expected"]
    (recording / "checks.jsonl").unlink()
    grading._recorder = None
    _run(nb, "grading")
    assert read_records(recording)[0]["expected"] == reference_inputs, "the same inputs fingerprint alike"


def test_the_learners_calls_stand_ins_and_changes_to_shared_objects_are_kept():
    nb = _notebook(ANSWER + "def helper(x):\n    return x\n", """
_ = double(torch.ones(1))                 # run for its effect: kept
helper = lambda x: x + 0                   # a stand-in the answer calls: kept
model = torch.nn.Linear(2, 2)
for p in model.parameters():
    p.data.add_(1.0)                       # changes the model through a loop variable: kept
unused = ref.double(torch.ones(1))         # feeds nothing: removed
trace = []
trace.append(ref.double(torch.ones(1)))   # a change to a new, unread object: removed
out = double(model.weight)
assert_equal(out.shape[0], ref.double(1) // 2)
""")
    source = graded_sources(nb, "grading")["test0"]
    for kept in ("_ = ", "helper = ", "p.data.add_"):
        assert kept in source, source
    for removed in ("unused", "trace", "ref.double"):
        assert removed not in source, source


def test_expected_values_walked_beside_the_answers_are_dropped_from_the_loop(recording):
    nb = _notebook(ANSWER, """
cases = [torch.ones(2), torch.zeros(3)]
wants = [ref.double(c) for c in cases]
gots = [double(c) for c in cases]
for k, (got, want) in enumerate(zip(gots, wants)):
    assert_tensor_close(got, want, name=f"case {k}: {want}")
""")
    source = graded_sources(nb, "grading")["test0"]
    assert "want" not in source, source
    _run(nb, "grading")
    assert Reference.calls == 0
    assert [r["actual"].tolist() for r in read_records(recording) if r["kind"] == "close"] == [[2.0, 2.0], [0.0] * 3]


def test_only_arguments_the_test_built_itself_are_fingerprinted():
    nb = _notebook(ANSWER, """
x = torch.ones(3)
first = double(x)            # x recorded
second = double(x)           # x was given to the learner's code, which may have changed it: not recorded
third = double(first)        # the learner's output: not recorded
fourth = double(torch.zeros(2))
""")
    source = graded_sources(nb, "reference")["test0"]
    calls = [node for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Call)
             and getattr(node.func.func, "attr", None) == "record_inputs"]
    recorded = sorted(ast.unparse(node.args[0]) for node in calls)
    assert recorded == ["torch.zeros(2)", "x"], source
    assert {"double", "first", "second", "third", "fourth"} <= learner_code(nb)[0]


def test_a_name_reused_in_a_later_cell_is_judged_there_afresh():
    nb = _notebook(ANSWER, "y = double(torch.ones(1))\n",
                   "y = ref.double(torch.ones(1))\nassert_tensor_close(double(torch.ones(1)), y)\n")
    taint = learner_code(nb)
    assert "y" in taint[0]
    assert "y" not in taint[1]
    assert "ref.double" not in graded_sources(nb, "grading")["test1"]


@pytest.mark.parametrize("lesson", lesson_names(ROOT))
def test_every_check_of_every_lesson_is_graded_with_its_expected_value_withheld(lesson):
    """The course's own test cells: in grading mode each parses, and each check keeps only the
    learner's value and WITHHELD."""
    for solution in sorted((ROOT / "solutions" / lesson).glob("*.ipynb")):
        nb = json.loads(solution.read_text())
        sources = notebook_sources(solution, "grading")
        test_ids = [nbgrader_meta(c)["grade_id"] for c in nb["cells"] if is_test_cell(c)]
        assert sorted(sources) == sorted(test_ids)
        for grade_id, source in sources.items():
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CHECKS:
                    assert len(node.args) == 2, f"{grade_id}: {ast.unparse(node)}"
                    assert not node.keywords, f"{grade_id}: {ast.unparse(node)}"
                    assert ast.unparse(node.args[1]).endswith(".WITHHELD"), f"{grade_id}: {ast.unparse(node)}"


def test_a_hidden_test_keeps_its_markers_so_the_scrub_and_the_feedback_find_it():
    nb = _notebook(ANSWER, "### BEGIN HIDDEN TESTS\nassert_equal(double(1), ref.double(1))\n### END HIDDEN TESTS\n")
    source = graded_sources(nb, "grading")["test0"]
    lines = source.splitlines()
    assert lines[0] == "### BEGIN HIDDEN TESTS", source
    assert lines[-1] == "### END HIDDEN TESTS", source
