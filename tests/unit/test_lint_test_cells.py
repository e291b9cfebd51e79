"""The authoring lint for test cells (tools/lint_test_cells.py): a test cell only observes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tools.lint_test_cells import lint_cell, lint_notebook

ROOT = Path(__file__).resolve().parents[2]


def _problems(source: str) -> list[str]:
    return [p.text for p in lint_cell("test", textwrap.dedent(source), set())]


def test_a_cell_that_only_observes_passes():
    assert _problems("""
        x = torch.randn(3, generator=torch.Generator().manual_seed(hidden_seed(1)))
        if expecting():
            x_before = x.clone()
        out = stable_softmax(x)
        assert_true(out is not x, "return a new tensor")
        assert_tensor_close(out, expect=lambda: torch.softmax(x, dim=-1), name=f"softmax of {x.shape}")
        assert_equal(x, expect=lambda: x_before, name="x after the call")
    """) == []


@pytest.mark.parametrize(("source", "problem"), [
    ("assert_tensor_close(f(x), torch.softmax(x, -1))", "given its expected value as an argument"),
    ("assert_equal(f(x), name='f')", "needs expect=lambda"),
    ("want = ref(x)\nassert_tensor_close(f(x), expect=lambda: want)", "'want' is computed while grading"),
    ("want = ref(x)\nassert_true(torch.equal(f(x), want), 'differs')", "'want' is computed while grading"),
    ("x_copy = x.clone()\nf(x)\nassert_equal(x, expect=lambda: x_copy)", "'x_copy' is computed while grading"),
    ("for (n, p1), p2 in zip(m1.named_parameters(), m2.parameters()):\n"
     "    assert_tensor_close(p1.grad, expect=lambda: p2.grad, name=n)", "'p2' is computed while grading"),
    ("def _expected(x):\n    return ref(x)\nassert_equal(f(x), expect=lambda: _expected(x))", "'_expected' is computed"),
    ("if expecting():\n    want = ref(x)\nassert_true(f(x) == want, 'differs')", "bound under `if expecting():`"),
])
def test_an_expected_value_where_grading_runs_is_refused(source, problem):
    problems = _problems(source)
    assert any(problem in p for p in problems), problems


def test_every_lessons_test_cells_only_observe():
    problems = [f"{path.parent.name}: {p}" for path in sorted(ROOT.glob("solutions/*/*.ipynb"))
                for p in lint_notebook(path)]
    assert problems == []
