"""Helpers for graded exercises: shortcuts made unavailable, and checks whose messages teach.

Hidden tests wrap the learner's function in `forbid(...)`, so that calling the reference
implementation (or the PyTorch built-in that does the same job) raises a clear error instead
of earning the points:

    with forbid(torch.softmax, "torch.Tensor.softmax", torch.nn.functional.softmax):
        out = stable_softmax(x)

The comparison helpers raise `AssertionError` with the shape, dtype, first mismatching index
and largest error, which is what a learner needs to find the bug.

A test cell only observes. Every check takes the learner's value and, separately, a function
that computes the expected one:

    assert_tensor_close(out, expect=lambda: torch.softmax(x, dim=-1), name="stable_softmax(x)")

and whatever only serves expected values sits in a block the grading run skips:

    if expecting():  # False while a submission is graded
        twin = copy.deepcopy(model); torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.5)

In JupyterLab a check calls `expect` at once and says what is wrong. While grading, the grader
sets `COURSE_GRADING_RECORD` to a folder and announces each test cell (`begin_checks`); every
helper writes what it observed (tensors as safetensors, everything else as tagged JSON, never
pickle). The instructor's solution runs with its expected values (the reference); a submission's
kernel runs with `COURSE_WITHHOLD_EXPECTED=1`: no `expect` is called and no `expecting()` block
runs, so its process never computes or holds an expected value. The grader compares the two
records in its own process with these same helpers (grader/verdicts.py). Hidden inputs are drawn
from `hidden_seed(n)`, which a grading batch varies (`COURSE_GRADING_SEED`), running the
reference with the same seed.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import (
    BuiltinFunctionType,
    CodeType,
    FunctionType,
    MethodDescriptorType,
    WrapperDescriptorType,
)
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from course_lib.grading_env import RECORD_ENV, RECORD_FILE, SEED_ENV, UNWRITTEN, WITHHOLD_ENV  # noqa: F401 (re-exported)


class ForbiddenCallError(RuntimeError):
    """Raised when an exercise calls a function it is asked to implement itself."""


def _resolve(target: str | Callable) -> tuple[str, Any]:
    if not isinstance(target, str):
        name = f"{getattr(target, '__module__', None) or ''}.{getattr(target, '__qualname__', repr(target))}"
        return name.lstrip("."), target
    parts = target.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError as error:
            raise ValueError(f"forbid({target!r}): no such attribute ({error})") from None
        return target, obj
    raise ValueError(f"forbid({target!r}): cannot import any module prefix of {target!r}")


def _owner_of_dotted(target: str) -> tuple[Any, str] | None:
    """For 'pkg.Class.method', the class and the method name (patched on the class)."""
    module_path, _, attr = target.rpartition(".")
    owner_path, _, owner_name = module_path.rpartition(".")
    if not owner_path:
        return None
    try:
        owner = getattr(importlib.import_module(owner_path), owner_name)
    except (ImportError, AttributeError):
        return None
    return (owner, attr) if isinstance(owner, type) else None


def _public_name(bindings: list[tuple[Any, str]]) -> str | None:
    """The shortest public dotted name of a callable, e.g. 'torch.softmax'."""
    names = [
        f"{module.__name__}.{attr}"
        for module, attr in bindings
        if not module.__name__.startswith("_") and "._" not in module.__name__ and not attr.startswith("_")
    ]
    return min(names, key=len) if names else None


def _message(name: str, hint: str | None) -> str:
    message = (
        f"{name} is off-limits in this exercise: the point is to implement it yourself. "
        f"Rewrite your answer without calling it."
    )
    return message + (f" Hint: {hint}" if hint else "")


def _raiser(message: str, name: str) -> Callable:
    def forbidden(*args, **kwargs):
        __tracebackhide__ = True
        raise ForbiddenCallError(message)

    forbidden.__name__ = f"forbidden_{name.rsplit('.', 1)[-1]}"
    return forbidden


def _raising_code(message: str, function: FunctionType) -> CodeType:
    """A code object that raises `message`, for a function's `__code__`.

    It runs with the *target's* globals, so it reaches the exception through `__import__`.
    """
    namespace: dict[str, Any] = {}
    exec(  # noqa: S102 (a fixed template; the message is a repr'd constant)
        "def forbidden(*args, **kwargs):\n"
        f"    raise __import__('course_lib.grading', fromlist=['_']).ForbiddenCallError({message!r})\n",
        namespace,
    )
    return namespace["forbidden"].__code__.replace(co_name=function.__code__.co_name)


class _ForbidTorchFunctions(TorchFunctionMode):
    """Sees every call of a torch function or Tensor method, however the learner reached it."""

    def __init__(self, messages: dict[int, str]):
        super().__init__()
        self.messages = messages

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if id(func) in self.messages:
            raise ForbiddenCallError(self.messages[id(func)])
        return func(*args, **(kwargs or {}))


class _ForbidAtenOps(TorchDispatchMode):
    """Sees the ATen operators every torch-level route ends in (torch.ops.aten.*, private aliases)."""

    def __init__(self, messages: dict[Any, str]):
        super().__init__()
        self.messages = messages

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in torch._dynamo.disable unless this says no;
        # that wrapper imports torch._dynamo (2.5 s on one core) on the first operator seen.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in self.messages:
            raise ForbiddenCallError(self.messages[func.overloadpacket])
        return func(*args, **(kwargs or {}))


def _is_torch_callable(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or getattr(getattr(obj, "__objclass__", None), "__module__", "") or ""
    return module.startswith("torch") or isinstance(obj, (BuiltinFunctionType, MethodDescriptorType, WrapperDescriptorType))


@contextmanager
def forbid(*targets: str | Callable, hint: str | None = None) -> Iterator[None]:
    """Make each target raise `ForbiddenCallError` inside the `with` block.

    A target is a callable or a dotted name such as `"torch.Tensor.softmax"`. Each is blocked
    by every route a learner could take to it:

    - Python functions (`course_lib` references, `torch.nn.functional.softmax`) get a raising
      `__code__`, so aliases, default arguments and closures that captured them raise too;
    - every module-level name bound to the target is patched (including notebook aliases), and
      a dotted name is patched on its class, so `x.softmax()` raises;
    - torch functions and Tensor methods are also refused by a `TorchFunctionMode`;
    - ATen operators given as `torch.ops.aten.<op>` are refused by a `TorchDispatchMode`, which
      catches private aliases such as `torch._softmax` and `torch.ops.aten._softmax`.

    Everything is restored on exit, even when the block raises.
    """
    patches: list[tuple[Any, str, Any, bool]] = []  # (namespace, attr, original, had_own_attr)
    swapped_code: list[tuple[FunctionType, CodeType]] = []
    torch_messages: dict[int, str] = {}
    aten_messages: dict[Any, str] = {}
    keep_alive = []  # ids in torch_messages stay valid while the originals are referenced
    with ExitStack() as modes:
        try:
            for target in targets:
                name, obj = _resolve(target)
                if isinstance(obj, torch._ops.OpOverloadPacket):
                    aten_messages[obj] = _message(f"torch.ops.aten.{obj.__name__}", hint)
                    continue
                bindings = [
                    (module, attr)
                    for module in list(sys.modules.values())
                    if isinstance(getattr(module, "__dict__", None), dict)
                    for attr, value in list(vars(module).items())
                    if value is obj
                ]
                if not isinstance(target, str):
                    name = _public_name(bindings) or name
                message = _message(name, hint)
                replacement = _raiser(message, name)
                owner = _owner_of_dotted(target) if isinstance(target, str) else None
                if owner is not None:
                    cls, attr = owner
                    patches.append((cls, attr, cls.__dict__.get(attr), attr in cls.__dict__))
                    setattr(cls, attr, replacement)
                for module, attr in bindings:
                    patches.append((module, attr, obj, True))
                    setattr(module, attr, replacement)
                if isinstance(obj, FunctionType) and not obj.__code__.co_freevars:
                    swapped_code.append((obj, obj.__code__))
                    obj.__code__ = _raising_code(message, obj)
                if _is_torch_callable(obj):
                    torch_messages[id(obj)] = message
                    keep_alive.append(obj)
            if torch_messages:
                modes.enter_context(_ForbidTorchFunctions(torch_messages))
            if aten_messages:
                modes.enter_context(_ForbidAtenOps(aten_messages))
            yield
        finally:
            for function, original_code in reversed(swapped_code):
                function.__code__ = original_code
            for namespace, attr, original, had_own_attr in reversed(patches):
                if had_own_attr:
                    setattr(namespace, attr, original)
                else:
                    delattr(namespace, attr)


def aten_ops(*names: str) -> tuple:
    """The ATen operators of these names that this PyTorch build has (they vary across versions)."""
    return tuple(getattr(torch.ops.aten, name) for name in names if hasattr(torch.ops.aten, name))


#: Every route to a softmax, for exercises that ask for one (pass to `forbid`).
SOFTMAX_SHORTCUTS = (
    torch.softmax, torch.nn.functional.softmax, torch.special.softmax, "torch.Tensor.softmax",
    torch.log_softmax, torch.nn.functional.log_softmax, torch.special.log_softmax, "torch.Tensor.log_softmax",
    *aten_ops("_softmax", "_log_softmax", "_safe_softmax"),
)

#: PyTorch's own attention, for exercises that build attention (pass to `forbid`).
ATTENTION_SHORTCUTS = (
    torch.nn.functional.scaled_dot_product_attention, torch.nn.functional.multi_head_attention_forward,
    "torch.nn.MultiheadAttention.forward",
    *aten_ops(
        "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
    ),
)

# --- Recording the checks while grading -------------------------------------------------------



class _Recorder:
    """Appends one JSON line per check to RECORD_FILE, and its tensors to a safetensors file."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.cell: str | None = None
        self.index = 0
        self.written = 0

    def begin(self, cell: str) -> None:
        self.cell, self.index = cell, 0

    def record(self, kind: str, actual: Any, expected: Any, **options: Any) -> None:
        if self.cell is None:  # a helper called outside a graded test cell (a demo, say)
            return
        tensors: dict[str, torch.Tensor] = {}
        entry = {"cell": self.cell, "index": self.index, "kind": kind,
                 "actual": encode_value(actual, tensors), "expected": encode_value(expected, tensors),
                 "options": options, "tensors": None}
        self.folder.mkdir(parents=True, exist_ok=True)
        if tensors:
            from safetensors.torch import save_file

            entry["tensors"] = f"check-{self.written:05d}.safetensors"
            save_file(tensors, str(self.folder / entry["tensors"]))
        with open(self.folder / RECORD_FILE, "a") as f:
            f.write(json.dumps(entry) + "\n")
        self.index += 1
        self.written += 1


_recorder: _Recorder | None = None


_WITHHOLD = os.environ.get(WITHHOLD_ENV) == "1"


def expecting() -> bool:
    """Whether expected values are computed here: True in JupyterLab and in the instructor's
    reference run, False in a submission's kernel while it is graded. A test cell puts whatever
    only serves expected values under `if expecting():`."""
    return not _WITHHOLD


def hidden_seed(n: int) -> int:
    """The seed a hidden test draws its inputs from: `n` itself, unless a grading batch set
    COURSE_GRADING_SEED, which gives every batch other inputs (the reference runs with the same
    seed, so outputs remembered from earlier feedback match nothing)."""
    batch = int(os.environ.get(SEED_ENV) or 0)
    if not batch:
        return n
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{batch}:{n}".encode()).digest()[:4], "little") & 0x7FFFFFFF


class _Withheld:
    """The expected value a check records while a submission is graded: the grader holds it, not
    the learner's process, and the check leaves the verdict to the grader."""

    def __repr__(self) -> str:
        return "WITHHELD"

    def __reduce__(self) -> str:
        return "WITHHELD"


WITHHELD = _Withheld()


def _machinery() -> dict[str, tuple[Any, Any]]:
    """What grading relies on in the kernel: this module's functions and classes, and the
    public callables of torch, torch.nn.functional, torch.Tensor and torch.testing, each as (the
    object, its code object)."""
    import torch.nn.functional

    found = {}
    for prefix, namespace in (("torch", torch), ("torch.nn.functional", torch.nn.functional),
                              ("torch.Tensor", torch.Tensor), ("torch.testing", torch.testing),
                              (__name__, sys.modules[__name__])):
        private = namespace is not sys.modules[__name__]  # torch's own private names may change lazily
        for name, value in list(vars(namespace).items()):
            if callable(value) and not name.startswith("__") and not (private and name.startswith("_")):
                found[f"{prefix}.{name}"] = (value, getattr(value, "__code__", None))
    return found


def _unchanged(before: tuple[Any, Any], now: tuple[Any, Any] | None) -> bool:
    """Whether a callable is still the one seen before: the same object and code, or a wrapper
    of it (torch wraps some of its functions when torch.compile is first imported)."""
    if now is None:
        return False
    value, code = now
    for _ in range(8):
        if value is before[0]:
            return code is before[1] or getattr(value, "__code__", None) is before[1]
        value = getattr(value, "__wrapped__", None)
        if value is None:
            return False
    return False


#: The helpers test cells call by their notebook names.
HELPER_NAMES = ("assert_tensor_close", "assert_equal", "assert_sequence_equal", "assert_number_close",
                "assert_shape", "assert_true", "assert_raises", "forbid", "reports_errors", "case",
                "expecting", "hidden_seed")


def check_machinery(namespace: dict) -> None:
    """Run by the grader, silently, before each graded test cell: records the names of whatever
    the grading relies on that was replaced since the helpers were imported (torch's functions,
    these helpers or their code, the notebook's names for them). The verdicts do not depend on
    it (the grader replays them); it tells the instructor that an answer reached for them."""
    now = _machinery()
    changed = sorted(name for name, before in _MACHINERY.items() if not _unchanged(before, now.get(name)))
    module = sys.modules[__name__]
    changed += sorted(f"the notebook's {name}" for name in HELPER_NAMES
                      if name in namespace and namespace[name] is not getattr(module, name))
    if _WITHHOLD != (os.environ.get(WITHHOLD_ENV) == "1"):
        changed.append(f"{__name__}._WITHHOLD")
    if changed:
        _record("machinery", changed[:20], None)


def announcement(cell: str) -> str:
    """The code a grader runs in the kernel (silently, outside the notebook) before the graded
    test cell `cell`: grader/executor.py, for a submission, the reference run and
    `make execute-solutions` alike (tools/run_as_script.py runs it where Jupyter is absent)."""
    grading = '__import__("course_lib.grading", fromlist=["_"])'
    return f"{grading}.begin_checks({cell!r}); {grading}.check_machinery(globals())"


def begin_checks(cell: str) -> None:
    """Called by the grader before each graded test cell: the checks that follow belong to `cell`.
    Does nothing unless COURSE_GRADING_RECORD names a folder."""
    global _recorder
    folder = os.environ.get(RECORD_ENV)
    if not folder:
        return
    if _recorder is None or _recorder.folder != Path(folder):
        _recorder = _Recorder(Path(folder))
    _recorder.begin(cell)


def _record(kind: str, actual: Any, expected: Any, **options: Any) -> None:
    if _recorder is not None:
        _recorder.record(kind, actual, expected, **options)


def encode_value(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """`value` as tagged JSON; tensors go into `tensors` by key. Only exact built-in types are
    kept: an object of any other class (one whose `__eq__` always says yes, say) is recorded as
    opaque, and an opaque value equals nothing."""
    kind = type(value)
    if value is WITHHELD:
        return {"withheld": True}
    if isinstance(value, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = value.detach().as_subclass(torch.Tensor).to("cpu").contiguous().clone()
        return {"tensor": key}
    if kind in (bool, int, str) or value is None:
        return {"value": value}
    if kind is float:
        return {"float": repr(value)}  # nan and inf survive JSON this way
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind in (list, tuple):
        return {kind.__name__: [encode_value(v, tensors) for v in value]}
    if kind is dict:
        return {"dict": [[encode_value(k, tensors), encode_value(v, tensors)] for k, v in value.items()]}
    if kind.__module__ == "numpy":
        import numpy as np

        if isinstance(value, np.ndarray):
            return encode_value(torch.from_numpy(value.copy()), tensors)
        if isinstance(value, np.generic):
            return encode_value(value.item(), tensors)
    return {"opaque": f"{kind.__module__}.{kind.__qualname__}"}


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return type(x).__name__


# The assert helpers below set __tracebackhide__ and raise through _fail: IPython hides the
# helpers' frames but always shows the frame that raises, so a learner sees their own line, this
# one short function, and the message, instead of the helper's source.
def _fail(message: str) -> None:
    raise AssertionError(message)


def _expected(expect: Any, helper: str) -> Any:
    """The expected value of a check: `expect()`, or WITHHELD while a submission is graded."""
    __tracebackhide__ = True
    if not callable(expect):
        raise TypeError(f"{helper}(..., expect=...) takes a function of no arguments that computes the "
                        f"expected value, e.g. expect=lambda: torch.softmax(x, dim=-1); got {_describe(expect)}. "
                        "While a submission is graded it is never called.")
    return WITHHELD if _WITHHOLD else expect()


def assert_shape(actual: Any, *, expect: Callable[[], Sequence[int]], name: str = "output",
                 hint: str | None = None) -> None:
    """`actual` is a tensor of exactly the shape `expect()` gives; otherwise a message that says
    how it differs."""
    __tracebackhide__ = True  # IPython and pytest show the learner's line, not this helper's source
    expected_shape = _expected(expect, "assert_shape")
    if _recorder is not None:  # a tensor is recorded as its shape, a 1-D int64 tensor; anything else as itself
        recorded = torch.tensor(list(actual.shape), dtype=torch.int64) if isinstance(actual, torch.Tensor) else actual
        _record("shape", recorded, expected_shape if expected_shape is WITHHELD else [int(n) for n in expected_shape],
                name=name, hint=hint)
    if expected_shape is WITHHELD:
        return
    _check_shape(actual, expected_shape, name, hint)


def _check_shape(actual: Any, expected_shape: Sequence[int], name: str, hint: str | None) -> None:
    __tracebackhide__ = True
    if not isinstance(actual, torch.Tensor):
        _fail(f"{name}: expected a torch.Tensor, got {_describe(actual)}")
    got, want = tuple(actual.shape), tuple(expected_shape)
    if got == want:
        return
    message = f"{name}: expected shape {want}, got {got}"
    if sorted(got) == sorted(want):
        message += " (the same sizes in another order: is a transpose or permute missing or extra?)"
    elif math.prod(got) == math.prod(want):
        message += " (the same number of elements: check your view/reshape)"
    elif len(got) != len(want):
        message += f" ({len(got)} dimensions instead of {len(want)}: check which dims you summed or kept)"
    if hint:
        message += f". Hint: {hint}"
    _fail(message)


def assert_tensor_close(
    actual: Any,
    *,
    expect: Callable[[], torch.Tensor],
    rtol: float = 1e-5,
    atol: float = 1e-6,
    name: str = "output",
    hint: str | None = None,
    check_dtype: bool = True,
) -> None:
    """Like `torch.testing.assert_close(actual, expect())`, with messages written for learners."""
    __tracebackhide__ = True
    expected = _expected(expect, "assert_tensor_close")
    _record("close", actual, expected, rtol=rtol, atol=atol, name=name, hint=hint, check_dtype=check_dtype)
    if expected is WITHHELD:
        return
    _check_shape(actual, expected.shape, name, hint)
    suffix = f" Hint: {hint}" if hint else ""
    if check_dtype and actual.dtype != expected.dtype:
        _fail(f"{name}: expected dtype {expected.dtype}, got {actual.dtype}.{suffix}")
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    bad_nan = torch.isnan(a) & ~torch.isnan(e)
    if bad_nan.any():
        index = tuple(bad_nan.nonzero()[0].tolist())
        _fail(
            f"{name}: {int(bad_nan.sum())} NaN value(s), first at index {index} where "
            f"{e[index].item():.6g} was expected (an overflow in exp? a division by zero?).{suffix}"
        )
    both_nan = torch.isnan(a) & torch.isnan(e)
    close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True) | both_nan
    if close.all():
        return
    mismatched = ~close
    index = tuple(mismatched.nonzero()[0].tolist())
    error = (a - e).abs().nan_to_num(nan=math.inf)
    _fail(
        f"{name}: {int(mismatched.sum())} of {a.numel()} values differ (rtol={rtol}, atol={atol}). "
        f"First at index {index}: got {a[index].item():.6g}, expected {e[index].item():.6g}. "
        f"Largest absolute error {error.max().item():.3g}.{suffix}"
    )


def assert_sequence_equal(actual: Any, *, expect: Callable[[], Sequence], name: str = "output",
                          hint: str | None = None) -> None:
    """`actual` and `expect()` are equal sequences; otherwise the first differing position and both
    values there."""
    __tracebackhide__ = True
    expected = _expected(expect, "assert_sequence_equal")
    _record("sequence", actual, expected, name=name, hint=hint)
    if expected is WITHHELD:
        return
    suffix = f" Hint: {hint}" if hint else ""
    if isinstance(actual, torch.Tensor):
        actual = actual.tolist()
    try:
        actual_list = list(actual)
    except TypeError:
        raise AssertionError(f"{name}: expected a sequence like {list(expected)[:5]}..., got {_describe(actual)}") from None
    expected_list = list(expected)
    for i, (a, e) in enumerate(zip(actual_list, expected_list, strict=False)):
        if a != e:
            _fail(f"{name}: first difference at position {i}: got {a!r}, expected {e!r}.{suffix}")
    if len(actual_list) != len(expected_list):
        _fail(
            f"{name}: length {len(actual_list)}, expected {len(expected_list)} "
            f"(the first {min(len(actual_list), len(expected_list))} items agree).{suffix}"
        )


def assert_equal(actual: Any, *, expect: Callable[[], Any], name: str = "output", hint: str | None = None) -> None:
    """`actual == expect()` for numbers, strings, bytes, None and lists, tuples and dicts of them,
    with the exact type (True is not 1, a tuple is not a list); tensors must have the same shape
    and dtype and be equal elementwise. Otherwise a message with both values."""
    __tracebackhide__ = True
    expected = _expected(expect, "assert_equal")
    _record("equal", actual, expected, name=name, hint=hint)
    if expected is WITHHELD:
        return
    suffix = f" Hint: {hint}" if hint else ""
    if isinstance(expected, torch.Tensor):
        if isinstance(actual, torch.Tensor) and actual.shape == expected.shape and actual.dtype != expected.dtype:
            _fail(f"{name}: expected dtype {expected.dtype}, got {actual.dtype}.{suffix}")
        if not (isinstance(actual, torch.Tensor) and actual.shape == expected.shape and torch.equal(actual.cpu(), expected.cpu())):
            _fail(f"{name}: expected {_short(expected)}, got {_short(actual)}.{suffix}")
        return
    if not _same(actual, expected):
        kinds = ""
        if type(actual) is not type(expected) and not {type(actual), type(expected)} <= {int, float}:
            kinds = f" ({_a(type(actual).__name__)} where {_a(type(expected).__name__)} was expected"
            kinds += ": use .item() or .tolist()" if isinstance(actual, torch.Tensor) else ""
            kinds += ")"
        _fail(f"{name}: expected {_short(expected)}, got {_short(actual)}{kinds}.{suffix}")


def _same(a: Any, b: Any) -> bool:
    """Equality that only trusts built-in types: no learner-defined `__eq__` is ever called."""
    if type(a) is not type(b):
        if type(a) in (int, float) and type(b) in (int, float):  # 3 == 3.0 is fine for counts
            return a == b
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if type(a) in (bool, int, float, str, bytes, type(None)):
        return a == b
    return False


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def _short(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"{_describe(x)} {x.tolist() if x.numel() <= 12 else '...'}"
    text = repr(x)
    return text if len(text) <= 200 else text[:200] + "..."


def assert_number_close(actual: Any, *, expect: Callable[[], float], rtol: float = 1e-6, atol: float = 1e-9,
                        name: str = "output", hint: str | None = None) -> None:
    """`actual` is a Python number (or a one-element tensor) within `atol + rtol * |expected|` of
    `expected = expect()`; otherwise a message with both values and the difference."""
    __tracebackhide__ = True
    expected = _expected(expect, "assert_number_close")
    _record("number", actual, expected, rtol=rtol, atol=atol, name=name, hint=hint)
    if expected is WITHHELD:
        return
    suffix = f" Hint: {hint}" if hint else ""
    if isinstance(actual, torch.Tensor) and actual.numel() == 1:
        actual = actual.item()
    if type(actual) not in (int, float) and not (type(actual).__module__ == "numpy" and hasattr(actual, "item")):
        _fail(f"{name}: expected a number close to {expected:.6g}, got {_describe(actual)}.{suffix}")
    actual = float(actual)
    if not abs(actual - float(expected)) <= atol + rtol * abs(float(expected)):
        _fail(f"{name}: expected {float(expected):.6g}, got {actual:.6g} (off by {actual - float(expected):.3g}).{suffix}")


def assert_true(condition: Any, message: str) -> None:
    """A property of the learner's output holds (`condition` is exactly True); otherwise
    `message`. The condition is an observation: it reads only the learner's values and the
    test's inputs, never an expected value (compare those with the helpers above)."""
    __tracebackhide__ = True
    verdict = condition is True or (isinstance(condition, torch.Tensor) and condition.numel() == 1
                                    and condition.dtype == torch.bool and bool(condition.item()))
    _record("true", verdict, True, message=message)
    if not verdict:
        _fail(message)


def assert_raises(exception: type[BaseException], function: Callable, *args: Any,
                  name: str | None = None, hint: str | None = None, **kwargs: Any) -> BaseException:
    """`function(*args, **kwargs)` raises `exception` (or a subclass); returns the exception.
    A `ForbiddenCallError` is let through: it has its own message."""
    __tracebackhide__ = True
    name = name or f"{getattr(function, '__name__', 'the call')}(...)"
    if getattr(function, "__reports_errors__", False):  # the expected error keeps its type
        function = function.__wrapped__
    try:
        function(*args, **kwargs)
    except ForbiddenCallError:
        raise
    except exception as error:
        _record("raises", f"raised {exception.__name__}", exception.__name__, name=name, hint=hint)
        return error
    except Exception as error:
        outcome = f"raised {type(error).__name__}"
        _record("raises", outcome, exception.__name__, name=name, hint=hint)
        _fail(_raises_message(name, exception.__name__, f"{outcome}: {error}", hint))
    _record("raises", "returned", exception.__name__, name=name, hint=hint)
    _fail(_raises_message(name, exception.__name__, "returned normally", hint))
    raise AssertionError  # unreachable: _fail raised


def _raises_message(name: str, expected: str, outcome: str, hint: str | None) -> str:
    if outcome.startswith("raised NotImplementedError") and expected != "NotImplementedError":
        # an unanswered exercise: what its stub says, and no hint (the hint is about another mistake)
        said = outcome.partition(": ")[2]
        return said if UNWRITTEN in said else (f"{name} raised NotImplementedError: its exercise {UNWRITTEN} "
                                               "(write it, run its cell, then this test).")
    return f"{name} must raise {expected}; it {outcome}." + (f" Hint: {hint}" if hint else "")


def _show_unwritten(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> None:
    """IPython's handler of NotImplementedError and AssertionError: an unanswered exercise (its
    stub raised "Exercise N (`name`) is not written yet: ...", directly or inside a check) is shown
    as that one line, without a traceback through the course (or Triton); anything else as usual."""
    if UNWRITTEN in str(value):
        shell._showtraceback(etype, value, [str(value)])
    else:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)


def _install_unwritten_handler() -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and not shell.custom_exceptions:
        shell.set_custom_exc((NotImplementedError, AssertionError), _show_unwritten)



# --- Naming the case when the learner's code raises inside a hidden test ----------------------


class CaseError(AssertionError):
    """The learner's code raised while a test ran one named case; `learner_error` is what it raised."""

    learner_error: BaseException | None = None


def _case_error(description: str, error: BaseException) -> CaseError:
    """The error a test fails with. It is raised `from None`: its message says everything a
    learner sees of a hidden test, and formatting a deep traceback (a runaway recursion) can fail
    in IPython, which would leave the cell without an error."""
    if isinstance(error, NotImplementedError) and UNWRITTEN in str(error):
        case_error = CaseError(str(error))  # an unanswered exercise: its stub says which
    else:
        case_error = CaseError(f"{description} raised {type(error).__name__}: {error}")
    case_error.learner_error = error.with_traceback(None)
    return case_error


def describe_argument(x: Any) -> str:
    """A short, readable description of one argument of a call (for messages)."""
    if isinstance(x, torch.Tensor):
        if x.numel() <= 8:
            values = [round(v, 4) if isinstance(v, float) else v for v in x.flatten().tolist()]
            return f"tensor({values}{'' if x.dim() <= 1 else f', shape {tuple(x.shape)}'}, {x.dtype})"
        return f"a {tuple(x.shape)} {str(x.dtype).removeprefix('torch.')} tensor"
    if isinstance(x, (torch.nn.Module, torch.Generator)):
        return f"a {type(x).__name__}"
    if callable(x) and hasattr(x, "__name__"):
        return x.__name__
    if isinstance(x, float):
        return f"{x:g}"
    if isinstance(x, (list, tuple)) and len(x) > 6:
        return f"a {type(x).__name__} of {len(x)}"
    text = repr(x)
    if " object at 0x" in text:  # a default repr says nothing but the type
        return f"a {type(x).__name__}"
    return text if len(text) <= 60 else f"a {type(x).__name__} ({text[:40]}...)"


def describe_call(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """`name(arg, ..., key=value)` with each argument described briefly."""
    parts = [describe_argument(a) for a in args] + [f"{k}={describe_argument(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


@contextmanager
def case(description: str) -> Iterator[None]:
    """Hidden tests run each case inside `case("keep_top_p with four equal tokens, p = 0.5")`.
    If the learner's code raises (anything but an assertion or a forbidden call), the test fails
    with a message that names the case and the learner's exception, and never shows the hidden
    test's code."""
    __tracebackhide__ = True
    try:
        yield
    except (AssertionError, ForbiddenCallError):
        raise
    except Exception as error:
        raise _case_error(description, error) from None


def reports_errors(function: Callable, name: str | None = None) -> Callable:
    """`function`, whose exceptions (but assertions and forbidden calls) become an
    AssertionError naming the call and its arguments:

        keep_top_p = reports_errors(keep_top_p)   # at the top of a hidden test
        keep_top_p(torch.zeros(4), 0.5)  # AssertionError: keep_top_p(tensor([0.0, 0.0, 0.0, 0.0],
                                         # torch.float32), 0.5) raised ZeroDivisionError: ...

    `assert_raises` calls the unwrapped function, so expected errors keep their type."""
    if getattr(function, "__reports_errors__", False) or isinstance(function, type) or not callable(function):
        return function
    label = name or getattr(function, "__name__", "the call")

    @functools.wraps(function)
    def reporting(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return function(*args, **kwargs)
        except (AssertionError, ForbiddenCallError):
            raise
        except Exception as error:
            raise _case_error(describe_call(label, args, kwargs), error) from None

    reporting.__reports_errors__ = True  # type: ignore[attr-defined]
    return reporting


_install_unwritten_handler()
_MACHINERY = _machinery()  # taken when the notebook imports the helpers, before any answer runs
