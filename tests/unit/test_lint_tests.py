"""tools/lint_tests.py catches tests that cannot fail."""

from tools.lint_tests import check_source


def test_flags_a_comparison_without_assert():
    problems = check_source("def test_x():\n    assert 1\n    1 + 1 == 2\n", "t.py")
    assert len(problems) == 1
    assert "t.py:3" in problems[0]


def test_flags_a_test_without_any_assertion():
    problems = check_source("def test_x():\n    y = 2\n", "t.py")
    assert problems == ["t.py:1: test_x asserts nothing, so it can never fail"]


def test_accepts_asserts_raises_and_asserting_helpers():
    source = (
        "import pytest\n"
        "def _same(a, b):\n    assert a == b\n"
        "def test_a():\n    assert 1\n"
        "def test_b():\n    with pytest.raises(ValueError):\n        int('x')\n"
        "def test_c():\n    _same(1, 1)\n"
        "def test_d():\n    assert_tensor_close(1, 1)\n"
    )
    assert check_source(source, "t.py") == []


def test_graded_cell_must_assert():
    assert check_source("x = 1\nprint(x)\n", "cell", whole_is_a_test=True) == ["cell: this graded test cell asserts nothing, so it can never fail"]


def test_flags_a_dropped_allclose_and_a_non_assertion_raise():
    problems = check_source("import torch\ndef test_x():\n    torch.allclose(a, b)\n    if a: raise ValueError\n", "t.py")
    assert problems == [
        "t.py:3: this statement computes a value and drops it; did you mean `assert ...`?",
        "t.py:2: test_x asserts nothing, so it can never fail",
    ]


def test_test_cells_must_check_through_recording_helpers():
    from tools.lint_tests import unrecorded_checks

    source = (
        "got = f(x)\n"
        "assert got == 3, 'f(x) should be 3'\n"
        "if got != 3:\n"
        "    raise AssertionError('f(x) should be 3')\n"
        "try:\n"
        "    g(x)\n"
        "except RuntimeError as error:\n"
        "    raise AssertionError(f'g(x) raised {error}') from None\n"
        "assert_equal(got, expect=lambda: 3, name='f(x)')\n"
    )
    assert unrecorded_checks(source) == [2, 4], "bare asserts and check-style raises are flagged, an except's raise is not"
