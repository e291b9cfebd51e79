"""course_lib.grading: forbid() blocks shortcuts and restores them; messages teach."""

import re

import pytest
import torch
import torch.nn.functional as F

from course_lib import grading
from course_lib.grading import (
    ForbiddenCallError,
    assert_sequence_equal,
    assert_shape,
    assert_tensor_close,
    forbid,
)

ALIAS_OF_SOFTMAX = torch.softmax  # a name a learner might have imported under another name


def test_forbid_blocks_every_route_to_the_function():
    x = torch.randn(3)
    with forbid(torch.softmax, F.softmax, "torch.Tensor.softmax"):
        with pytest.raises(ForbiddenCallError, match="torch.softmax is off-limits"):
            torch.softmax(x, 0)
        with pytest.raises(ForbiddenCallError):
            ALIAS_OF_SOFTMAX(x, 0)
        with pytest.raises(ForbiddenCallError):
            F.softmax(x, 0)
        with pytest.raises(ForbiddenCallError, match="torch.Tensor.softmax"):
            x.softmax(0)


def test_forbid_restores_everything_even_after_an_error():
    x = torch.randn(3)
    before = (torch.softmax, F.softmax, "softmax" in torch.Tensor.__dict__)
    with pytest.raises(ValueError), forbid(torch.softmax, F.softmax, "torch.Tensor.softmax"):
        int("not a number")
    assert (torch.softmax, F.softmax, "softmax" in torch.Tensor.__dict__) == before
    assert ALIAS_OF_SOFTMAX is torch.softmax
    assert torch.allclose(x.softmax(0), torch.softmax(x, 0))


def test_forbid_leaves_other_functions_alone():
    with forbid(torch.softmax):
        assert torch.exp(torch.zeros(1)).item() == 1.0


def test_forbid_message_includes_the_hint():
    with forbid(torch.logsumexp, hint="use amax, exp and log"), pytest.raises(ForbiddenCallError, match="use amax"):
        torch.logsumexp(torch.zeros(2), 0)


def test_forbid_rejects_names_that_do_not_exist():
    with pytest.raises(ValueError, match="no such attribute"), forbid("torch.no_such_function"):
        pass


def test_assert_shape_explains_a_transpose():
    with pytest.raises(AssertionError, match=r"expected shape \(2, 5, 16\), got \(2, 16, 5\).*transpose"):
        assert_shape(torch.zeros(2, 16, 5), expect=lambda: (2, 5, 16))
    with pytest.raises(AssertionError, match="expected a torch.Tensor, got list"):
        assert_shape([1, 2], expect=lambda: (2,))


def test_assert_tensor_close_names_the_first_mismatch():
    expected = torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(AssertionError, match=r"1 of 3 values differ.*index \(2,\): got 4, expected 3"):
        assert_tensor_close(torch.tensor([1.0, 2.0, 4.0]), expect=lambda: expected)
    with pytest.raises(AssertionError, match="NaN"):
        assert_tensor_close(torch.tensor([1.0, float("nan"), 3.0]), expect=lambda: expected)
    with pytest.raises(AssertionError, match="dtype"):
        assert_tensor_close(expected.double(), expect=lambda: expected)
    assert_tensor_close(expected + 1e-8, expect=lambda: expected)


def test_assert_sequence_equal_names_the_first_difference():
    with pytest.raises(AssertionError, match=r"position 1: got 'b', expected 'c'"):
        assert_sequence_equal(["a", "b"], expect=lambda: ["a", "c"])
    with pytest.raises(AssertionError, match="length 1, expected 2"):
        assert_sequence_equal([1], expect=lambda: [1, 2])
    assert_sequence_equal(torch.tensor([1, 2]), expect=lambda: [1, 2])


def test_public_names():
    assert {"forbid", "assert_tensor_close", "assert_shape", "assert_sequence_equal"} <= set(dir(grading))


def _softmax_via_default_argument(x, _sm=torch.softmax):
    return _sm(x, 0)


def _captured_reference():
    from course_lib.attention import stable_softmax

    captured = stable_softmax
    return lambda x: captured(x, 0)


def test_forbid_catches_references_captured_before_the_block():
    """Default arguments and closures keep the original object; forbid still refuses it."""
    import course_lib.attention

    x = torch.randn(4)
    call_captured = _captured_reference()
    with forbid(torch.softmax, course_lib.attention.stable_softmax):
        with pytest.raises(ForbiddenCallError, match="torch.softmax"):
            _softmax_via_default_argument(x)
        with pytest.raises(ForbiddenCallError, match="stable_softmax"):
            call_captured(x)
    assert torch.allclose(call_captured(x), torch.softmax(x, 0)), "the reference must work again after the block"


def test_forbid_aten_ops_catches_private_aliases():
    x = torch.randn(4)
    with forbid(torch.ops.aten._softmax, "torch.ops.aten._log_softmax"):
        for route in (lambda: torch._softmax(x, 0, False), lambda: torch.ops.aten._softmax(x, 0, False),
                      lambda: torch.special.softmax(x, 0), lambda: torch.special.log_softmax(x, 0).exp()):
            with pytest.raises(ForbiddenCallError, match="torch.ops.aten._"):
                route()
        manual = x.exp() / x.exp().sum()  # elementary operations still work
    assert torch.allclose(manual, torch.softmax(x, 0))


def test_forbid_python_function_code_is_restored():
    original_code = F.softmax.__code__
    with forbid(F.softmax):
        assert F.softmax.__code__ is not original_code
    assert F.softmax.__code__ is original_code


# --- a learner's exception inside a hidden test names the case ---------------------------------


def _divides_by_zero(logits, p):
    return logits / 0 if isinstance(logits, int) else 1 / 0


def _needs_positive(p):
    if p <= 0:
        raise ValueError("p must be positive")
    return p


def test_reports_errors_names_the_call_and_its_arguments_and_keeps_the_cause():
    wrapped = grading.reports_errors(_divides_by_zero, name="keep_top_p")
    with pytest.raises(AssertionError) as caught:
        wrapped(torch.tensor([0.4, 0.2, 0.2, 0.2]).log(), 0.5)
    message = str(caught.value)
    assert message.startswith("keep_top_p(tensor([-0.9163, -1.6094, -1.6094, -1.6094], torch.float32), 0.5) ")
    assert message.endswith("raised ZeroDivisionError: division by zero")
    assert isinstance(caught.value.learner_error, ZeroDivisionError)
    assert caught.value.__suppress_context__  # no deep traceback to format
    with pytest.raises(AssertionError, match=r"keep_top_p\(a \(6, 5, 40\) float64 tensor, p=0\.3\)"):
        wrapped(torch.zeros(6, 5, 40, dtype=torch.float64), p=0.3)


def test_reports_errors_passes_results_assertions_and_forbidden_calls_through():
    assert grading.reports_errors(_needs_positive)(2) == 2
    wrapped = grading.reports_errors(lambda: grading.assert_equal(1, expect=lambda: 2, name="the count"))
    with pytest.raises(AssertionError, match="the count") as caught:
        wrapped()
    assert not isinstance(caught.value, grading.CaseError)
    with forbid(torch.softmax), pytest.raises(ForbiddenCallError):
        grading.reports_errors(lambda x: torch.softmax(x, 0))(torch.ones(2))


def test_reports_errors_wraps_once_and_leaves_classes_alone():
    wrapped = grading.reports_errors(_needs_positive)
    assert grading.reports_errors(wrapped) is wrapped
    assert grading.reports_errors(torch.nn.Linear) is torch.nn.Linear
    assert wrapped.__name__ == "_needs_positive"


def test_assert_raises_sees_the_learners_own_exception_type_through_reports_errors():
    wrapped = grading.reports_errors(_needs_positive)
    error = grading.assert_raises(ValueError, wrapped, -1, name="p = -1")
    assert isinstance(error, ValueError)
    with pytest.raises(AssertionError, match="must raise TypeError; it raised ValueError"):
        grading.assert_raises(TypeError, wrapped, -1, name="p = -1")


STUB_SAYS = "Exercise 1 (`minigpt`) is not written yet: replace this line with your code."


def _unwritten(*args):
    raise NotImplementedError(STUB_SAYS)


def test_an_unwritten_exercise_is_what_its_stub_says_and_no_hint_about_another_mistake():
    """assert_raises, reports_errors and case: an unanswered exercise's failure is its stub's one
    line, not a hint written for a wrong answer (NotImplementedError is a RuntimeError too)."""
    with pytest.raises(AssertionError) as caught:
        grading.assert_raises(ValueError, _unwritten, "alibi", name="MiniGPT('alibi')",
                              hint="raise ValueError for 'alibi'")
    assert str(caught.value) == STUB_SAYS
    with pytest.raises(grading.CaseError, match=rf"^{STUB_SAYS}$".replace("(", r"\(").replace(")", r"\)")):
        grading.reports_errors(_unwritten)(1)
    with pytest.raises(AssertionError) as caught:
        grading.assert_raises(ValueError, _needs_positive_not_written, name="f(-1)", hint="say ValueError")
    assert "NotImplementedError" in str(caught.value)
    assert "Hint" not in str(caught.value)
    # the grader's replay holds only the outcome, never the message
    assert grading._raises_message("MiniGPT(...)", "ValueError", "raised NotImplementedError", "h") == \
        "MiniGPT(...) raised NotImplementedError: its exercise is not written yet (write it, run its cell, then this test)."
    assert grading._raises_message("f(0)", "ValueError", "raised TypeError", "h") == \
        "f(0) must raise ValueError; it raised TypeError. Hint: h"


def _needs_positive_not_written(*args):
    raise NotImplementedError()


def test_ipython_shows_an_unwritten_exercise_as_its_one_line(capsys):
    """In IPython (JupyterLab's kernel), the error of an unanswered exercise is its stub's line:
    no traceback through the course or Triton. Other errors keep their traceback."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.set_custom_exc((), None)
        grading._install_unwritten_handler()
        assert shell.custom_exceptions == (NotImplementedError, AssertionError)
        shell.run_cell(f"def f():\n    raise NotImplementedError({STUB_SAYS!r})\nf()")
        assert capsys.readouterr().out.strip() == STUB_SAYS
        shell.run_cell(f"raise AssertionError({STUB_SAYS!r})")
        assert capsys.readouterr().out.strip() == STUB_SAYS
        result = shell.run_cell("def g():\n    raise NotImplementedError('later')\ng()")
        shown = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
        assert "most recent call last" in shown
        assert "NotImplementedError: later" in shown
        assert isinstance(result.error_in_exec, NotImplementedError), "still an error: the cell fails"
    finally:
        shell.set_custom_exc((), None)
        InteractiveShell.clear_instance()


def test_case_names_the_case_for_errors_and_not_for_assertions():
    with pytest.raises(grading.CaseError, match=r"^top_p with four equal tokens raised ZeroDivisionError"):
        with grading.case("top_p with four equal tokens"):
            _ = 1 / 0
    with pytest.raises(AssertionError, match="^plain$") as caught, grading.case("a case"):
        raise AssertionError("plain")
    assert not isinstance(caught.value, grading.CaseError)


@pytest.mark.parametrize(("value", "described"), [
    (torch.tensor([1, 2]), "tensor([1, 2], torch.int64)"),
    (torch.zeros(2, 2), "tensor([0.0, 0.0, 0.0, 0.0], shape (2, 2), torch.float32)"),
    (torch.nn.Linear(2, 3), "a Linear"),
    (torch.Generator().manual_seed(0), "a Generator"),
    (len, "len"),
    (object(), "a object"),
    (0.1, "0.1"),
    (list(range(10)), "a list of 10"),
    ("x" * 100, "a str ('xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...)"),
])
def test_describe_argument_is_short(value, described):
    assert grading.describe_argument(value) == described


def test_a_runaway_recursion_becomes_a_short_case_error():
    def recurse(n):
        return recurse(n + 1)

    with pytest.raises(grading.CaseError, match=r"^recurse\(0\) raised RecursionError") as caught:
        grading.reports_errors(recurse)(0)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


def test_assert_equal_on_tensors_compares_the_dtype():
    # torch.equal(int32, int64) is True: the dtype is checked on its own, and named
    with pytest.raises(AssertionError, match="expected dtype torch.int64, got torch.int32"):
        grading.assert_equal(torch.tensor([1, 2], dtype=torch.int32), expect=lambda: torch.tensor([1, 2]),
                             name="the tokens")
    grading.assert_equal(torch.tensor([1, 2]), expect=lambda: torch.tensor([1, 2]), name="the tokens")
