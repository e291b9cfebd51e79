"""Helpers for graded exercises: shortcuts made unavailable, and checks whose messages teach.

Hidden tests wrap the learner's function in `forbid(...)`, so that calling the reference
implementation (or the PyTorch built-in that does the same job) raises a clear error instead
of earning the points:

    with forbid(torch.softmax, "torch.Tensor.softmax", torch.nn.functional.softmax):
        out = stable_softmax(x)

The comparison helpers raise `AssertionError` with the shape, dtype, first mismatching index
and largest error, which is what a learner needs to find the bug.
"""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
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


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return type(x).__name__


# The assert helpers below set __tracebackhide__ and raise through _fail: IPython hides the
# helpers' frames but always shows the frame that raises, so a learner sees their own line, this
# one short function, and the message, instead of the helper's source.
def _fail(message: str) -> None:
    raise AssertionError(message)


def assert_shape(actual: Any, expected_shape: Sequence[int], name: str = "output", hint: str | None = None) -> None:
    """`actual` is a tensor of exactly `expected_shape`; otherwise a message that says how it differs."""
    __tracebackhide__ = True  # IPython and pytest show the learner's line, not this helper's source
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
    expected: torch.Tensor,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    name: str = "output",
    hint: str | None = None,
    check_dtype: bool = True,
) -> None:
    """Like `torch.testing.assert_close`, with messages written for learners."""
    __tracebackhide__ = True
    assert_shape(actual, expected.shape, name=name, hint=hint)
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


def assert_sequence_equal(actual: Any, expected: Sequence, name: str = "output", hint: str | None = None) -> None:
    """Two sequences are equal; otherwise the first differing position and both values there."""
    __tracebackhide__ = True
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
