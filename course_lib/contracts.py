"""An exercise's contract, declared once, and the edge cases its hidden tests draw from it.

An exercise's prose states what its function promises: which arguments are tensors, whether
leading batch dimensions are allowed, the dtypes it takes (the output keeps the input's), that it
returns a new object and leaves its inputs unchanged, the extreme inputs it must survive and the
arguments it refuses. `Contract` is that statement as data, and `check_contract` runs the cases it
implies through the learner's function, recording every observation with `course_lib.grading`'s
helpers (the expected values come from the reference, computed only where `expecting()`):

    contract = Contract(
        "stable_softmax", tensors=("x",), batch_dims=True, dtypes=(torch.float32, torch.float64),
        extremes=(Extreme("every score far below zero", "x", lambda x: x - 1e4),),
    )
    check_contract(stable_softmax, contract, seed=hidden_seed(7),
                   inputs=lambda g, batch, dtype: {"x": torch.randn(*batch, 5, generator=g, dtype=dtype)},
                   reference=lambda x: torch.softmax(x, dim=-1))

The cases, in this order (each named in its messages): the base case in every allowed dtype; with
`batch_dims`, a batch of one and two extra batch dimensions; every extreme; every invalid argument.
Arguments are passed positionally, in the order `inputs` builds them (a learner may rename a
parameter, not move it), except those named in `keywords`. For each returned value: equal to the reference's (shape, dtype and values); with `new_object`, no
storage shared with a tensor argument (a list is not returned as itself); with `inputs_unchanged`,
every tensor argument equal to a copy taken before the call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from course_lib.grading import (
    assert_raises,
    assert_tensor_close,
    assert_true,
    case,
    describe_argument,
    expecting,
)

#: Batch shapes the `batch_dims` cases use: a batch of one (a `.squeeze()` drops it) and two extra
#: leading dimensions (code that unpacks `B, T, D = x.shape` fails on them).
BATCH_OF_ONE = (1,)
EXTRA_BATCH_DIMS = (2, 3)


@dataclass(frozen=True)
class Extreme:
    """An extreme input the prose names: `argument` replaced by `change(argument)` in the base case."""

    description: str
    argument: str
    change: Callable[[Any], Any]


@dataclass(frozen=True)
class Invalid:
    """An argument the function must refuse: the base case with `changes` applied raises `error`."""

    description: str
    changes: Mapping[str, Any]
    error: type[BaseException] = ValueError
    hint: str | None = None


@dataclass(frozen=True)
class Contract:
    """What an exercise's function promises, as its prose states it (see the module's docstring)."""

    name: str
    tensors: tuple[str, ...]
    batch_dims: bool = False
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    new_object: bool = True
    inputs_unchanged: bool = True
    extremes: tuple[Extreme, ...] = ()
    invalid: tuple[Invalid, ...] = ()
    outputs: int = 1
    base_batch: tuple[int, ...] = (2,)
    keywords: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.dtypes:
            raise ValueError(f"Contract({self.name!r}) allows no dtype: name at least one, e.g. dtypes=(torch.float32,)")
        for extreme in self.extremes:
            if not isinstance(extreme, Extreme):
                raise TypeError(f"Contract({self.name!r}).extremes holds {extreme!r}: use Extreme(description, argument, change)")
        for bad in self.invalid:
            if not isinstance(bad, Invalid):
                raise TypeError(f"Contract({self.name!r}).invalid holds {bad!r}: use Invalid(description, changes, error)")

    def cases(self) -> list[tuple[str, tuple[int, ...], torch.dtype, Extreme | None]]:
        """(description, batch shape, dtype, extreme) for every case but the invalid arguments."""
        base = self.base_batch if self.batch_dims else ()
        found = [(f"{_dtype(d)} input" + (f" with batch dims {base}" if base else ""), base, d, None) for d in self.dtypes]
        if self.batch_dims:
            found.append((f"a batch of one, batch dims {BATCH_OF_ONE}", BATCH_OF_ONE, self.dtypes[0], None))
            found.append((f"extra batch dims {EXTRA_BATCH_DIMS}", EXTRA_BATCH_DIMS, self.dtypes[0], None))
        found += [(e.description, base, self.dtypes[0], e) for e in self.extremes]
        return found

    def statement(self) -> str:
        """The contract in one paragraph, as the exercise's prose should state it."""
        parts = []
        if self.batch_dims:
            parts.append("any leading batch dimensions (a batch of one included)")
        parts.append("dtype " + " or ".join(_dtype(d) for d in self.dtypes) + ", kept in the output")
        if self.new_object:
            parts.append("a new object, sharing no memory with its arguments")
        if self.inputs_unchanged:
            parts.append("its arguments left unchanged")
        parts += [e.description for e in self.extremes]
        parts += [f"{b.description} raises {b.error.__name__}" for b in self.invalid]
        return f"{self.name}: " + "; ".join(parts) + "."


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def shares_memory(a: Any, b: Any) -> bool:
    """Whether `a` and `b` are tensors over the same storage (a view, or the object itself), or
    the same list, dict or set."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.numel() == 0 or b.numel() == 0:
            return a is b
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    if isinstance(a, (list, dict, set, bytearray)):
        return a is b
    return False


def _copy(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def _split(arguments: dict[str, Any], keywords: tuple[str, ...]) -> tuple[list[Any], dict[str, Any]]:
    """A case's arguments as a call passes them: positionally in their order, except those the
    contract names in `keywords` (a learner may rename a parameter; the prose fixes its place)."""
    return [v for k, v in arguments.items() if k not in keywords], {k: v for k, v in arguments.items() if k in keywords}


def _outputs(value: Any, count: int) -> list[Any]:
    """The `count` values a call returned: the value itself, or the items of the tuple it returned."""
    return [value] if count == 1 else list(value)


def check_contract(
    function: Callable,
    contract: Contract,
    *,
    inputs: Callable[[torch.Generator, tuple[int, ...], torch.dtype], dict[str, Any]],
    reference: Callable[..., Any],
    seed: int,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    hint: str | None = None,
) -> None:
    """Run every case of `contract` through `function` and record what it returns (see the module's
    docstring). `inputs(generator, batch_shape, dtype)` builds one case's keyword arguments, its
    tensors with `batch_shape` in front; `reference(**arguments)` is called only where expected values
    are computed, on copies taken before `function` ran."""
    __tracebackhide__ = True
    base = inputs(torch.Generator().manual_seed(seed), contract.base_batch if contract.batch_dims else (),
                  contract.dtypes[0])
    for extreme in contract.extremes:  # a typo in a hidden test is the test's error, before any answer runs
        if extreme.argument not in base:
            raise KeyError(f"the extreme {extreme.description!r} changes {extreme.argument!r}, which the "
                           f"inputs of {contract.name} do not have ({', '.join(base)})")
    for bad in contract.invalid:
        if set(bad.changes) - set(base):
            raise KeyError(f"the invalid case {bad.description!r} changes {sorted(set(bad.changes) - set(base))}, "
                           f"which the inputs of {contract.name} do not have ({', '.join(base)})")
    for number, (description, batch, dtype, extreme) in enumerate(contract.cases()):
        arguments = inputs(torch.Generator().manual_seed(seed + number), batch, dtype)
        if extreme is not None:
            arguments[extreme.argument] = extreme.change(arguments[extreme.argument])
        before = {k: _copy(v) for k, v in arguments.items()} if expecting() else {}
        label = f"{contract.name} on {description}"
        with case(f"{contract.name}({', '.join(f'{k}={describe_argument(v)}' for k, v in arguments.items())}), {description}"):
            args, kwargs = _split(arguments, contract.keywords)
            result = function(*args, **kwargs)
        if contract.outputs > 1:
            assert_true(isinstance(result, tuple) and len(result) == contract.outputs,
                        f"{label}: expected a tuple of {contract.outputs} values, got {describe_argument(result)}")
        # the reference runs once per case, on copies of the untouched inputs, only where expected
        # values are computed
        wanted = _outputs(reference(**{k: _copy(v) for k, v in before.items()}), contract.outputs) if expecting() else None
        for index, value in enumerate(_outputs(result, contract.outputs)):
            name = label if contract.outputs == 1 else f"{label}, output {index}"
            assert_tensor_close(value, expect=lambda index=index, wanted=wanted: wanted[index], rtol=rtol, atol=atol,
                                name=name, hint=hint)
            if contract.new_object:
                shared = [k for k in contract.tensors if shares_memory(value, arguments[k])]
                assert_true(not shared, f"{name}: the returned tensor shares memory with the argument "
                                        f"{' and '.join(shared)} (it is that tensor or a view of it). The contract asks "
                                        "for a new tensor: compute one out of place, or .clone() it")
        if contract.inputs_unchanged:
            for k in contract.tensors:
                assert_tensor_close(arguments[k], expect=lambda k=k, before=before: before[k], rtol=0.0, atol=0.0,
                                    name=f"the argument {k} after {label}",
                                    hint=f"do not change {k} in place (no {k} -= ..., {k}.masked_fill_, out=...): "
                                         "compute a new tensor")
    for bad in contract.invalid:
        args, kwargs = _split({**base, **bad.changes}, contract.keywords)
        assert_raises(bad.error, function, *args, name=f"{contract.name} with {bad.description}", hint=bad.hint,
                      **kwargs)

