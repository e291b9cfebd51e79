"""The answer policy (grader/answer_policy.py): what an answer cell may contain before it runs.

Specification: every honest solution passes; the ordinary things learners write pass; each
hostile answer of the round trip is caught for what it does (not for a syntax error).
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
import torch

from grader.answer_policy import check_answer, notebook_definitions, withheld_source
from grader.autograde import protected_names
from tests.grading.submissions import HOSTILE_ANSWERS
from tools.nbtools import is_answer_cell, lesson_names

ROOT = Path(__file__).resolve().parents[2]
LESSON_00_PROTECTED = {"torch": "torch", "F": "torch.nn.functional",
                       "BPETokenizer": "course_lib.tokenization.BPETokenizer",
                       "forbid": "course_lib.grading.forbid",
                       "assert_tensor_close": "course_lib.grading.assert_tensor_close"}


@pytest.mark.parametrize("lesson", lesson_names(ROOT))
def test_every_solution_answer_passes_the_policy(lesson):
    protected = protected_names(ROOT / "notebooks" / lesson / f"{lesson}.ipynb")
    solution = nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    broken = {c.metadata["nbgrader"]["grade_id"]: [str(v) for v in check_answer(c.source, protected)]
              for c in solution.cells if is_answer_cell(c)}
    assert {k: v for k, v in broken.items() if v} == {}


@pytest.mark.parametrize("lesson", lesson_names(ROOT))
def test_every_wrong_and_right_answer_of_the_round_trip_passes_the_policy(lesson):
    """They are honest work: the policy must let them run, so that the tests judge them."""
    import textwrap

    from tests.grading.wrong_answers import RIGHT_VARIANTS, WRONG_ANSWERS

    protected = protected_names(ROOT / "notebooks" / lesson / f"{lesson}.ipynb")
    sources = [(f"{e} wrong {k}", s) for e, ss in WRONG_ANSWERS.get(lesson, {}).items() for k, s in enumerate(ss)]
    sources += [(f"{e} right", s) for e, s in RIGHT_VARIANTS.get(lesson, {}).items()]
    withheld = {label: [str(v) for v in check_answer(textwrap.dedent(s).strip(), protected)] for label, s in sources}
    assert {k: v for k, v in withheld.items() if v} == {}


@pytest.mark.parametrize("source", [
    "import torch\nimport torch.nn.functional as F\nimport math\nfrom collections import Counter",
    "x = torch.randn(3)\nprint(stable_softmax(x))",
    "class Block(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.w = 1",
    "from course_lib.tokenization import split_text",
    "def f(x):\n    torch = 3\n    return torch",  # a local name is not the notebook's `torch`
    "tok = BPETokenizer()\ntok.merges = {}",  # an object the answer built
    "import copy\nm = copy.deepcopy(x)",
    # careful Python (issue 30's right answers in other styles): annotations, numeric types,
    # operators, timing, a gradient reset
    "from __future__ import annotations\ndef f(x: torch.Tensor) -> torch.Tensor:\n    return x",
    "from typing import Final, Optional\nfrom collections.abc import Sequence\nimport numbers",
    "import operator\nfrom functools import reduce\nn = reduce(operator.mul, (2, 3), 1)",
    "from fractions import Fraction\nimport time\nimport warnings\nimport torch.linalg as LA",
    "def reset(model):\n    for p in model.parameters():\n        p.grad = None",
])
def test_what_learners_ordinarily_write_passes(source):
    assert check_answer(source, LESSON_00_PROTECTED) == []


@pytest.mark.parametrize("attack", sorted(HOSTILE_ANSWERS))
def test_each_hostile_answer_is_valid_python_and_caught_for_what_it_does(attack):
    source = HOSTILE_ANSWERS[attack]
    ast.parse(source)  # a syntax error would be caught for the wrong reason
    violations = check_answer(source, LESSON_00_PROTECTED)
    assert violations, f"{attack} passes the policy"
    assert all(v.rule not in ("not Python", "IPython magic or shell command") for v in violations)


@pytest.mark.parametrize(("source", "rule"), [
    ("from torch import ops", "import not allowed"),
    ("from course_lib import grading", "import not allowed"),
    ("y = numpy.ctypeslib", "attribute not allowed"),
    ("def g():\n    global forbid\n    forbid = None", "global declaration of a name the tests use"),
    ("%timeit f()", "IPython magic or shell command"),
    ("import torch.nn as torch", "rebinds a name the notebook's own cells define"),
    ("del F", "rebinds a name the notebook's own cells define"),
    ("m = torch\nm.isclose = None", "assignment to an attribute of something other than self"),
    ("def f(m):\n    m.isclose = None", "assignment to an attribute of something other than self"),
    ("t = (lambda: torch)()\nt.isclose = None", "assignment to an attribute of something other than self"),
    # getattr and eval under other names stay out with the newly allowed modules
    ("from operator import attrgetter", "import not allowed"),
    ("import operator\nf = operator.attrgetter('x')", "attribute not allowed"),
    ("import operator\nf = operator.methodcaller('x')", "attribute not allowed"),
    ("from typing import get_type_hints", "import not allowed"),
    ("import typing\nh = typing.get_type_hints(f)", "attribute not allowed"),
    ("m = torch\nm.grad.data = None", "assignment to an attribute of something other than self"),
])
def test_single_rules(source, rule):
    assert rule in [v.rule for v in check_answer(source, LESSON_00_PROTECTED)]


def test_the_isclose_attack_is_real_without_the_policy():
    """Why the policy exists: replacing torch.isclose makes a wrong answer pass the helper."""
    from course_lib.grading import assert_tensor_close

    original = torch.isclose
    try:
        exec(HOSTILE_ANSWERS["patches-isclose"], {"torch": torch})  # noqa: S102
        assert_tensor_close(torch.zeros(3), torch.ones(3), name="a wrong answer")  # passes!
    finally:
        torch.isclose = original
    with pytest.raises(AssertionError):
        assert_tensor_close(torch.zeros(3), torch.ones(3), name="a wrong answer")


def test_a_withheld_answer_raises_and_names_its_violations():
    source = withheld_source("softmax_answer", check_answer("import os", {}))
    with pytest.raises(RuntimeError, match="softmax_answer withheld.*import not allowed"):
        exec(source, {})  # noqa: S102


def test_notebook_definitions_map_imports_to_their_targets():
    names = notebook_definitions(["import torch.nn.functional as F\nfrom a.b import c as d\ndef h(): pass\nx = 1"])
    assert names == {"F": "torch.nn.functional", "d": "a.b.c", "h": None}


def _redact():
    from grader.nbgrader_plugins import RedactFeedback

    return RedactFeedback()


def test_feedback_keeps_only_the_verdict_of_a_hidden_test_and_screens_other_outputs():
    v4 = nbformat.v4
    hidden = v4.new_code_cell("x = 1\n### BEGIN HIDDEN TESTS\nsecret_inputs = torch.arange(12345)\n### END HIDDEN TESTS")
    hidden.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "h", "points": 1}
    hidden.outputs = [v4.new_output("stream", name="stdout", text="printed hidden data"),
                      v4.new_output("error", ename="AssertionError", evalue="row 0 is wrong",
                                    traceback=["secret_inputs = torch.arange(12345)", "AssertionError: row 0"])]
    answer = v4.new_code_cell("### BEGIN HIDDEN TESTS\n### BEGIN HIDDEN TESTS\ndef f(): pass")
    answer.metadata["nbgrader"] = {"grade": False, "solution": True, "grade_id": "a"}
    answer.outputs = [v4.new_output("stream", name="stdout", text="I saw secret_inputs = torch.arange(12345)")]
    nb = v4.new_notebook(cells=[answer, hidden])
    nb, _ = _redact().preprocess(nb, {})
    assert [o.output_type for o in hidden.outputs] == ["error"]
    assert hidden.outputs[0].traceback == ["AssertionError: row 0 is wrong"]
    assert "withheld" in answer.outputs[0].text
    assert "BEGIN HIDDEN TESTS" not in answer.source
