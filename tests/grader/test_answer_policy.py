"""The answer policy (grader/answer_policy.py): which cells reach for the grading machinery.

Specification: every honest solution, right variant and honest idiom passes; every attempt on
the grading machinery is named by the rule it breaks; each hostile answer of the round trip is
caught for what it does (not for a syntax error); cells the learner added are checked too,
the instructor's are not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
import torch

from grader.answer_policy import (
    BUILT_NAME,
    DISPATCH,
    FRAMES,
    GLOBAL,
    GRADING,
    HOOKS,
    IMPORTS,
    IPYTHON,
    MAGIC,
    MARKER,
    MONKEYPATCH,
    NAMESPACE,
    NOT_PYTHON,
    PRIVATE,
    REBINDS,
    STRING_CODE,
    STRING_NAME,
    SYSTEM,
    check_answer,
    notebook_definitions,
    policy_violations,
    withheld_source,
    withhold,
)
from grader.cells import is_answer_cell, lesson_names
from grader.intake import protected_names
from tests.grading.submissions import HOSTILE_ANSWERS

ROOT = Path(__file__).resolve().parents[2]
LESSON_00_PROTECTED = {"torch": "torch", "F": "torch.nn.functional",
                       "BPETokenizer": "course_lib.tokenization.BPETokenizer",
                       "forbid": "course_lib.grading.forbid",
                       "assert_tensor_close": "course_lib.grading.assert_tensor_close",
                       "case": "course_lib.grading.case", "begin_checks": "course_lib.grading.begin_checks",
                       "reports_errors": "course_lib.grading.reports_errors", "nn": "torch.nn",
                       "TorchFunctionMode": "torch.overrides.TorchFunctionMode"}


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


# The idioms careful people write (the audit of issue 27 withheld each of them): none is flagged.
HONEST_IDIOMS = {
    "typing annotations": "from typing import Optional, Protocol\ndef f(x: torch.Tensor, d: Optional[int] = None) -> torch.Tensor:\n    return x",
    "postponed annotations": "from __future__ import annotations\ndef f(x: torch.Tensor) -> torch.Tensor:\n    return x",
    "collections.abc": "from collections.abc import Sequence\ndef f(xs: Sequence[int]) -> int:\n    return len(xs)",
    "numbers": "import numbers\ndef f(x):\n    return isinstance(x, numbers.Real)",
    "operator": "import operator\nfrom functools import reduce\nn = reduce(operator.mul, (2, 3), 1)",
    "time": "import time\nstart = time.perf_counter()\nelapsed = time.perf_counter() - start",
    "warnings": "import warnings\ndef f(x):\n    if x.numel() == 0:\n        warnings.warn('empty input', stacklevel=2)\n    return x",
    "sys": "import sys\neps = sys.float_info.epsilon\nbig = sys.maxsize",
    "torch.linalg as LA": "import torch.linalg as LA\ndef norm(x):\n    return LA.vector_norm(x, dim=-1)",
    "private attribute of self": "class Helper:\n    def __init__(self, dim):\n        self._dim = dim\n    def size(self):\n        return self._dim",
    "self.modules()": "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(2, 2)\n"
                      "        for m in self.modules():\n            if isinstance(m, nn.Linear):\n                nn.init.zeros_(m.bias)",
    "type(x).__name__": "def f(x):\n    if not isinstance(x, torch.Tensor):\n        raise TypeError(f'expected a tensor, got {type(x).__name__}')\n    return x",
    "a parameter named input": "def forward(self, input):\n    return input.relu()",
    "a variable named vars": "vars = [torch.var(t) for t in (torch.ones(3), torch.zeros(3))]",
    "getattr(nn, name)": "def activation(name: str) -> nn.Module:\n    return getattr(nn, name)()",
    "getattr with a default": "def f(m):\n    return getattr(m, 'bias', None)",
    "setattr on self": "class C:\n    def __init__(self, **kw):\n        for k, v in kw.items():\n            setattr(self, k, v)",
    "torch.jit.script": "@torch.jit.script\ndef f(x: torch.Tensor) -> torch.Tensor:\n    return x * 2",
    "%timeit": "def f(x):\n    return x + 1\n%timeit f(torch.ones(3))",
    "%timeit with options": "%timeit -n 3 -r 2 torch.ones(3).sum()",
    "%%time": "%%time\ny = torch.ones(3).sum()",
    "%matplotlib": "%matplotlib inline\nx = 1",
    "__main__ self-check": "def f(x):\n    return x\nif __name__ == '__main__':\n    assert f(1) == 1",
    "attribute of an argument": "def update(cache, n):\n    cache.length = n",
    "attribute of a built object": "tok = BPETokenizer()\ntok.merges = {}",
    "gradient reset": "def reset(model):\n    for p in model.parameters():\n        p.grad = None",
    "super().__setattr__": "class M(nn.Module):\n    def __setattr__(self, name, value):\n        super().__setattr__(name, value)",
    "frozen dataclass": "from dataclasses import dataclass\n@dataclass(frozen=True)\nclass P:\n    d: int\n"
                        "    def __post_init__(self):\n        object.__setattr__(self, 'd', int(self.d))",
    "__repr__ with vars(self)": "class P:\n    def __repr__(self):\n        return f'P({vars(self)})'",
    "a local named like a helper": "def f(cases):\n    return [case * 2 for case in cases]",
    "a local import of the same name": "import torch\nimport torch.nn.functional as F\nfrom course_lib.tokenization import split_text",
    "a local shadowing torch": "def f(x):\n    torch = 3\n    return torch",
    "copy.deepcopy": "import copy\nm = copy.deepcopy(x)",
    "gc.collect": "import gc\ngc.collect()",
    "a checkpoint file": "import os\ndef save(state, folder, step):\n    os.makedirs(folder, exist_ok=True)\n"
                         "    path = os.path.join(folder, f'ckpt_{step}.pt')\n    torch.save(state, path + '.tmp')\n"
                         "    os.replace(path + '.tmp', path)",
    "a variable named like history, bound here": "In = x.shape[-1]\nOut = 2 * In",
    "a file of one's own": "with open('losses.txt', 'w') as f:\n    f.write('0.5')",
    "print to stderr": "import sys\nprint('odd input', file=sys.stderr)",
    "IPython.display": "from IPython.display import display\ndisplay(1)",
    "match statement and walrus": "def f(x):\n    match (n := x.ndim):\n        case 1:\n            return n\n        case _:\n            return -n",
}


@pytest.mark.parametrize("idiom", sorted(HONEST_IDIOMS))
def test_what_careful_people_write_passes(idiom):
    assert [str(v) for v in check_answer(HONEST_IDIOMS[idiom], LESSON_00_PROTECTED)] == []


@pytest.mark.parametrize("attack", sorted(HOSTILE_ANSWERS))
def test_each_hostile_answer_is_valid_python_and_caught_for_what_it_does(attack):
    source = HOSTILE_ANSWERS[attack]
    ast.parse(source)  # a syntax error would be caught for the wrong reason
    violations = check_answer(source, LESSON_00_PROTECTED)
    assert violations, f"{attack} passes the policy"
    assert all(v.rule not in (NOT_PYTHON, MAGIC) for v in violations)


def test_every_hostile_answer_of_the_round_trip_is_flagged():
    passing = [attack for attack, source in HOSTILE_ANSWERS.items() if not check_answer(source, LESSON_00_PROTECTED)]
    assert passing == []


# Attempts on the grading machinery, each with the rule that must name it.
MACHINERY_ATTEMPTS = [
    # the grading library and its helpers
    ("from course_lib import grading", GRADING),
    ("from course_lib.grading import begin_checks", GRADING),
    ("import course_lib\ncourse_lib.grading.forbid", GRADING),
    ("with forbid(torch.softmax):\n    pass", GRADING),
    ("def check(x):\n    assert_tensor_close(x, x)", GRADING),
    ("def g(cases):\n    with case('x'):\n        pass", GRADING),
    ("begin_checks('softmax_test')", GRADING),
    ("reports_errors(f)", GRADING),
    ("x = m._recorder", GRADING),
    # IPython's shell
    ("get_ipython().ast_transformers.append(t)", IPYTHON),
    ("shell = get_ipython()", IPYTHON),
    ("ip.input_transformers_post.append(f)", IPYTHON),
    ("ip.input_transformers_cleanup.clear()", IPYTHON),
    ("ns = ip.user_ns", IPYTHON),
    ("import IPython\nk = IPython.get_ipython().kernel", IPYTHON),
    ("import IPython\ns = IPython.shell", IPYTHON),
    ("import IPython\ne = IPython.events", IPYTHON),
    ("import ipykernel", IPYTHON),
    ("print(In)", IPYTHON),
    ("source = _ih[-2]", IPYTHON),
    ("source = _i3", IPYTHON),
    # frames and code objects
    ("import sys\nf = sys._getframe(1)", FRAMES),
    ("import inspect\nf = inspect.currentframe()", FRAMES),
    ("from inspect import stack", FRAMES),
    ("g = frame.f_back.f_globals", FRAMES),
    ("g = tb.tb_frame", FRAMES),
    ("g = gen.gi_frame", FRAMES),
    ("f.__code__ = g.__code__", FRAMES),
    ("g = f.__globals__", FRAMES),
    ("c = f.__closure__", FRAMES),
    ("s = object.__subclasses__()", FRAMES),
    ("b = print.__self__", FRAMES),
    ("t = e.__traceback__", FRAMES),
    ("f.__kwdefaults__['atol'] = 1e9", FRAMES),
    ("import linecache", FRAMES),
    ("import gc\nrefs = gc.get_referrers(f)", FRAMES),
    ("import gc\nobjs = gc.get_objects()", FRAMES),
    # torch's dispatch internals
    ("from torch.overrides import TorchFunctionMode", DISPATCH),
    ("from torch.utils._python_dispatch import TorchDispatchMode", DISPATCH),
    ("class M(TorchFunctionMode):\n    pass", DISPATCH),
    ("with torch._C.DisableTorchFunction():\n    pass", DISPATCH),
    ("class T(torch.Tensor):\n    @classmethod\n    def __torch_function__(cls, f, t, a=(), k=None):\n        pass", DISPATCH),
    ("class T:\n    def __torch_dispatch__(self):\n        pass", DISPATCH),
    ("y = torch.ops.aten.softmax(x, -1, False)", DISPATCH),
    ("lib = torch.library.Library('aten', 'IMPL')", DISPATCH),
    ("h = torch.overrides.has_torch_function", DISPATCH),
    ("from torch import ops", DISPATCH),
    # the import system, hooks, code from strings
    ("import sys\nsys.modules['torch'].isclose = f", IMPORTS),
    ("from sys import modules", IMPORTS),
    ("import importlib", IMPORTS),
    ("m = __import__('course_lib')", IMPORTS),
    ("b = __builtins__", IMPORTS),
    ("import builtins", IMPORTS),
    ("import sys\nsys.settrace(tracer)", HOOKS),
    ("import sys\nsys.setprofile(p)", HOOKS),
    ("import sys\nsys.addaudithook(h)", HOOKS),
    ("eval('1 + 1')", STRING_CODE),
    ("exec('x = 1')", STRING_CODE),
    ("code = compile('x', 'f', 'eval')", STRING_CODE),
    ("from typing import get_type_hints", STRING_CODE),
    ("import typing\nh = typing.get_type_hints(f)", STRING_CODE),
    ("import pickle", STRING_CODE),
    # files, processes, the network; the notebook's namespace
    ("text = open('solutions/00_setup/00_setup.ipynb').read()", STRING_NAME),
    ("import sqlite3\nsqlite3.connect(path)", SYSTEM),
    ("db = connect('../gradebook.db')", STRING_NAME),
    ("p = Path('solutions') / lesson", STRING_NAME),
    ("p = f'../solutions/{lesson}.ipynb'", STRING_NAME),
    ("import os\nfolder = os.environ['COURSE_GRADING_RECORD']", GRADING),
    ("import os\nos.system('ls')", SYSTEM),
    ("import os\nos.kill(1, 9)", SYSTEM),
    ("import subprocess", SYSTEM),
    ("from _io import open", PRIVATE),
    ("import numpy\ny = numpy.ctypeslib", SYSTEM),
    ("g = globals()", NAMESPACE),
    ("vars()['forbid'] = None", NAMESPACE),
    ("vars(torch)['isclose'] = None", NAMESPACE),
    ("d = torch.__dict__", NAMESPACE),
    # monkeypatching modules and imported names
    ("torch.isclose = lambda a, b, **k: True", MONKEYPATCH),
    ("F.softmax = None", MONKEYPATCH),
    ("m = torch\nm.isclose = None", MONKEYPATCH),
    ("import torch as t\nt.allclose = None", MONKEYPATCH),
    ("del torch.isclose", MONKEYPATCH),
    ("BPETokenizer.encode = None", MONKEYPATCH),
    ("def f(m):\n    m.isclose = None", MONKEYPATCH),
    ("t = (lambda: torch)()\nt.isclose = None", MONKEYPATCH),
    ("setattr(torch, 'isclose', None)", MONKEYPATCH),
    ("setattr(torch, name, None)", MONKEYPATCH),
    ("delattr(F, 'softmax')", MONKEYPATCH),
    ("object.__setattr__(torch, 'isclose', None)", MONKEYPATCH),
    ("private = torch._C", DISPATCH),
    ("import numpy as np\nx = np._core", PRIVATE),
    # rebinding and declaring the notebook's names
    ("forbid = lambda *a, **k: None", REBINDS),
    ("def assert_tensor_close(*a, **k):\n    pass", REBINDS),
    ("import torch.nn as torch", REBINDS),
    ("del F", REBINDS),
    ("(forbid := None)", REBINDS),
    ("def g():\n    global forbid\n    forbid = None", GLOBAL),
    # names that reach the machinery by a string
    ("g = getattr(f, '__globals__')", FRAMES),
    ("g = getattr(f, '__glo' + 'bals__')", FRAMES),
    ("g = getattr(f, ''.join(['__glo', 'bals__']))", FRAMES),
    ("n = '__glo' + 'bals__'\ng = getattr(f, n)", FRAMES),
    ("g = getattr(torch, '_C')", DISPATCH),
    ("g = getattr(f, chr(95) * 2 + 'globals' + chr(95) * 2)", BUILT_NAME),
    ("n = chr(95) * 2 + 'globals'\ng = getattr(f, n)", BUILT_NAME),
    ("g = getattr(f, f'__{name}__')", BUILT_NAME),
    ("peek(f, '__globals__')", STRING_NAME),
    ("peek(f, 'f_back')", STRING_NAME),
    ("m = load('course_lib.' + 'grading')", STRING_NAME),
    # markers and magics
    ("### BEGIN HIDDEN TESTS\nx = 1", MARKER),
    ("!ls", MAGIC),
    ("files = !ls", MAGIC),
    ("%env SECRET=1", MAGIC),
    ("%run solutions/00_setup/00_setup.ipynb", MAGIC),
    ("%%bash\nls", MAGIC),
    ("f?", MAGIC),
    ("%timeit torch.isclose.__globals__", FRAMES),  # the code a magic runs meets the same rules
    ("%%time\nimport subprocess", SYSTEM),
    ("get_ipython().run_line_magic('timeit', code)", MAGIC),
]


@pytest.mark.parametrize(("source", "rule"), MACHINERY_ATTEMPTS)
def test_each_attempt_on_the_grading_machinery_is_named(source, rule):
    found = [v.rule for v in check_answer(source, LESSON_00_PROTECTED)]
    assert rule in found, f"{source!r} should be flagged as {rule!r}, got {found}"


def test_the_isclose_attack_is_real_without_the_policy():
    """Why the policy exists: replacing torch.isclose makes a wrong answer pass the helper."""
    from course_lib.grading import assert_tensor_close

    original = torch.isclose
    try:
        exec(HOSTILE_ANSWERS["patches-isclose"], {"torch": torch})  # noqa: S102
        assert_tensor_close(torch.zeros(3), expect=lambda: torch.ones(3), name="a wrong answer")  # passes!
    finally:
        torch.isclose = original
    with pytest.raises(AssertionError):
        assert_tensor_close(torch.zeros(3), expect=lambda: torch.ones(3), name="a wrong answer")


def test_a_withheld_answer_raises_and_names_its_violations():
    source = withheld_source("softmax_answer", check_answer("import subprocess", {}))
    with pytest.raises(RuntimeError, match="softmax_answer withheld.*reaches processes, the network or the gradebook"):
        exec(source, {})  # noqa: S102


def _notebook_with_an_added_cell():
    v4 = nbformat.v4
    locked = v4.new_code_cell("import torch\nfrom course_lib.grading import forbid")
    locked.metadata["nbgrader"] = {"grade": False, "solution": False, "locked": True, "grade_id": "setup"}
    answer = v4.new_code_cell("def stable_softmax(x, dim=-1):\n    return x.softmax(dim)")
    answer.metadata["nbgrader"] = {"grade": False, "solution": True, "grade_id": "softmax_answer"}
    added = v4.new_code_cell("torch.isclose = lambda a, b, **k: torch.ones_like(a, dtype=torch.bool)")
    test = v4.new_code_cell("with forbid(torch.softmax):\n    stable_softmax(torch.ones(2))")
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "softmax_test", "points": 1}
    return v4.new_notebook(cells=[locked, answer, added, v4.new_markdown_cell("import subprocess"), test])


def test_policy_violations_checks_added_cells_and_leaves_the_instructors_alone():
    nb = _notebook_with_an_added_cell()
    findings = policy_violations(nb, {"torch": "torch", "forbid": "course_lib.grading.forbid"})
    assert [(index, label, [v.rule for v in vs]) for index, label, vs in findings] == [
        (2, "added or edited cell 2", [MONKEYPATCH])]


def test_the_instructors_own_cells_without_metadata_are_not_the_learners():
    """Released notebooks hold plain code cells of the instructor's (imports from
    course_lib.grading, demos) with no nbgrader metadata: as released they are not checked; a
    learner's edit of one is."""
    nb = _notebook_with_an_added_cell()
    demo = nbformat.v4.new_code_cell("from course_lib.grading import assert_shape\nshow = globals()")
    nb.cells.insert(1, demo)
    released = [demo.source]
    findings = policy_violations(nb, {"torch": "torch", "forbid": "course_lib.grading.forbid"}, released)
    assert [label for _, label, _ in findings] == ["added or edited cell 3"]
    nb.cells[1].source += "\nimport subprocess"
    findings = policy_violations(nb, {"torch": "torch", "forbid": "course_lib.grading.forbid"}, released)
    assert [label for _, label, _ in findings] == ["added or edited cell 1", "added or edited cell 3"]


def test_policy_violations_labels_an_answer_by_its_grade_id():
    nb = _notebook_with_an_added_cell()
    nb.cells[1].source = "import subprocess"
    assert [(i, label) for i, label, _ in policy_violations(nb, {})] == [(1, "softmax_answer"), (2, "added or edited cell 2")]


def test_withhold_replaces_only_the_offending_cells():
    nb = _notebook_with_an_added_cell()
    before = [c.source for c in nb.cells]
    withhold(nb, policy_violations(nb, {"torch": "torch", "forbid": "course_lib.grading.forbid"}))
    assert nb.cells[2].source.startswith("raise RuntimeError('answer added or edited cell 2 withheld by the grading policy")
    assert [c.source for i, c in enumerate(nb.cells) if i != 2] == [s for i, s in enumerate(before) if i != 2]


def test_the_honest_corpus_is_large_varied_and_passes_the_policy():
    """tests/grading/wrong_answers: at least 30 right answers in unusual styles over 8 lessons,
    each named for its idiom (IDIOMS), each a RIGHT answer of the round trip, none flagged."""
    import textwrap

    from tests.grading.wrong_answers import IDIOM_VARIANTS, RIGHT_VARIANTS

    entries = [(lesson, e) for lesson, idioms in IDIOM_VARIANTS.items() for e in idioms]
    assert len(entries) >= 30, f"only {len(entries)} idiom answers"
    assert len({lesson for lesson, _ in entries}) >= 8, sorted({lesson for lesson, _ in entries})
    missing = [(lesson, e) for lesson, e in entries if e not in RIGHT_VARIANTS[lesson]]
    assert missing == [], "an idiom names an exercise without a RIGHT answer"
    flagged = {}
    for lesson, exercise in entries:
        protected = protected_names(ROOT / "notebooks" / lesson / f"{lesson}.ipynb")
        source = textwrap.dedent(RIGHT_VARIANTS[lesson][exercise]).strip()
        violations = [str(v) for v in check_answer(source, protected)]
        if violations:
            flagged[f"{lesson} {exercise} ({IDIOM_VARIANTS[lesson][exercise]})"] = violations
    assert flagged == {}


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
