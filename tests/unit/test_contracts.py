"""course_lib.contracts: a declared contract's cases pass a right answer and catch each class of
mistake they exist for (run here as in a learner's JupyterLab, where expected values are computed)."""

from __future__ import annotations

import pytest
import torch

from course_lib.contracts import (
    BATCH_OF_ONE,
    EXTRA_BATCH_DIMS,
    Contract,
    Extreme,
    Invalid,
    check_contract,
    shares_memory,
)

SOFTMAX = Contract(
    "softmax", tensors=("x",), batch_dims=True, dtypes=(torch.float32, torch.float64),
    extremes=(Extreme("every score far below zero", "x", lambda x: x - 1e4),
              Extreme("scores of about ±1e4", "x", lambda x: x * 1e4)),
    invalid=(Invalid("dim=5", {"dim": 5}, IndexError),),
)


def _inputs(g, batch, dtype):
    return {"x": torch.randn(*batch, 4, 5, generator=g, dtype=dtype), "dim": -1}


def _check(function):
    check_contract(function, SOFTMAX, inputs=_inputs, reference=lambda x, dim: torch.softmax(x, dim=dim), seed=3)


def right(x, dim=-1):
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


def test_a_right_answer_passes_every_case():
    _check(right)


def test_the_cases_are_stated_in_order():
    described = [d for d, *_ in SOFTMAX.cases()]
    assert described == ["float32 input with batch dims (2,)", "float64 input with batch dims (2,)",
                         f"a batch of one, batch dims {BATCH_OF_ONE}", f"extra batch dims {EXTRA_BATCH_DIMS}",
                         "every score far below zero", "scores of about ±1e4"]
    statement = SOFTMAX.statement()
    assert "a batch of one" in statement
    assert "float32 or float64" in statement
    assert "dim=5 raises IndexError" in statement


def _squeezes(x, dim=-1):
    return right(x, dim).squeeze()


def _in_place(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True)
    x.exp_()
    return x / x.sum(dim=dim, keepdim=True)


def _returns_its_input(x, dim=-1):
    out = right(x, dim)
    x.copy_(out)
    return x


def _upcasts(x, dim=-1):
    return right(x.double(), dim)


def _shifts_only_large(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(m > 80, m, torch.zeros_like(m))
    e = (x - m).exp()
    return e / e.sum(dim=dim, keepdim=True)


def _unpacks_three_dims(x, dim=-1):
    B, T, V = x.shape
    return right(x, dim)


def _ignores_dim(x, dim=-1):
    return right(x, -1) if dim in (-1, 5) else right(x, dim)


@pytest.mark.parametrize(("wrong", "says"), [
    (_squeezes, "a batch of one"),
    (_in_place, "the argument x after"),
    (_returns_its_input, "shares memory with the argument x"),
    (_upcasts, "expected dtype torch.float32"),
    (_shifts_only_large, "far below zero"),
    (_unpacks_three_dims, "extra batch dims"),
    (_ignores_dim, "must raise IndexError"),
])
def test_each_class_of_mistake_is_caught_and_named(wrong, says):
    with pytest.raises(AssertionError, match=None) as caught:
        _check(wrong)
    assert says in str(caught.value), str(caught.value)


def test_a_function_of_several_outputs_is_checked_per_output():
    contract = Contract("pair", tensors=("x",), outputs=2)

    def reference(x):
        return x + 1, x * 2

    def inputs(g, batch, dtype):
        return {"x": torch.randn(3, generator=g, dtype=dtype)}

    check_contract(lambda x: (x + 1, x * 2), contract, inputs=inputs, reference=reference, seed=0)
    with pytest.raises(AssertionError, match="expected a tuple of 2 values"):
        check_contract(lambda x: x + 1, contract, inputs=inputs, reference=reference, seed=0)
    with pytest.raises(AssertionError, match="output 1"):
        check_contract(lambda x: (x + 1, x * 3), contract, inputs=inputs, reference=reference, seed=0)


def test_shares_memory_sees_views_and_the_same_list():
    x = torch.arange(6.0)
    assert shares_memory(x[2:], x)
    assert shares_memory(x.view(2, 3), x)
    assert not shares_memory(x.clone(), x)
    items = [1, 2]
    assert shares_memory(items, items)
    assert not shares_memory(list(items), items)
    assert not shares_memory(torch.empty(0), torch.empty(0))


def test_a_bad_contract_is_a_clear_error():
    with pytest.raises(ValueError, match="allows no dtype"):
        Contract("f", tensors=("x",), dtypes=())
    with pytest.raises(TypeError, match="use Extreme"):
        Contract("f", tensors=("x",), extremes=(("far below zero", "x"),))
    contract = Contract("f", tensors=("x",), extremes=(Extreme("huge", "y", lambda y: y),))
    with pytest.raises(KeyError, match="changes 'y'"):
        check_contract(lambda x: x, contract, inputs=lambda g, b, d: {"x": torch.zeros(2)}, reference=lambda x: x, seed=0)


def test_while_graded_the_reference_never_runs_and_the_inputs_are_not_kept(monkeypatch):
    import course_lib.grading as grading

    monkeypatch.setattr(grading, "_WITHHOLD", True)

    def reference(**_):
        raise AssertionError("the reference ran in a graded kernel")

    check_contract(right, SOFTMAX, inputs=_inputs, reference=reference, seed=3)  # observes only
    with pytest.raises(AssertionError, match="shares memory"):  # a property of the answer alone still fails here
        check_contract(_returns_its_input, SOFTMAX, inputs=_inputs, reference=reference, seed=3)


def test_arguments_go_by_position_so_a_renamed_parameter_passes():
    def renamed(scores, axis=-1):
        return right(scores, axis)

    _check(renamed)


def test_arguments_named_as_keywords_go_by_name():
    contract = Contract("softmax", tensors=("x",), keywords=("dim",))
    seen = {}

    def spy(x, *, dim):
        seen["dim"] = dim
        return right(x, dim)

    check_contract(spy, contract, inputs=lambda g, batch, dtype: {"dim": 0, "x": torch.randn(3, 4, generator=g)},
                   reference=lambda dim, x: torch.softmax(x, dim=dim), seed=1)
    assert seen == {"dim": 0}
