"""Reading the checks a grading kernel recorded, and judging them again in the grader's process.

The kernel side (recording) lives in `course_lib.grading`, which learners import; this side
never runs in a learner's process: decoding the records (tagged JSON and safetensors; nothing
is unpickled), storing the instructor's run, and replaying a check with the same helper, so a
failure carries the same message as in the notebook.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from course_lib import grading
from course_lib.grading import (
    RECORD_FILE,
    _check_shape,
    _fail,
    _raises_message,
    assert_equal,
    assert_number_close,
    assert_sequence_equal,
    assert_tensor_close,
)


class Opaque:
    """A recorded value of a type the record does not keep; equal to nothing."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<a {self.type_name} object>"


def decode_value(encoded: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The inverse of `encode_value`."""
    if not isinstance(encoded, dict) or len(encoded) != 1:
        raise ValueError(f"not a recorded value: {encoded!r}")
    (tag, payload), = encoded.items()
    if tag == "tensor":
        return tensors[payload]
    if tag == "value":
        return payload
    if tag == "float":
        return float(payload)
    if tag == "bytes":
        return bytes.fromhex(payload)
    if tag in ("list", "tuple"):
        items = [decode_value(v, tensors) for v in payload]
        return items if tag == "list" else tuple(items)
    if tag == "dict":
        return {decode_value(k, tensors): decode_value(v, tensors) for k, v in payload}
    if tag == "opaque":
        return Opaque(payload)
    if tag == "withheld":
        return grading.WITHHELD
    raise ValueError(f"unknown tag {tag!r} in a recorded value")


def read_records(folder: Path) -> list[dict]:
    """Every check recorded in `folder`, with its values decoded."""
    from safetensors.torch import load_file

    path = folder / RECORD_FILE
    if not path.exists():
        return []
    files: dict[str, dict[str, torch.Tensor]] = {}
    records = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        tensors: dict[str, torch.Tensor] = {}
        if entry.get("tensors"):
            name = Path(entry["tensors"]).name  # never a path out of the folder
            if name not in files:
                files[name] = load_file(str(folder / name))
            prefix = entry.get("prefix", "")
            tensors = {k[len(prefix):]: v for k, v in files[name].items() if k.startswith(prefix)}
        entry["actual"] = decode_value(entry["actual"], tensors)
        entry["expected"] = decode_value(entry["expected"], tensors)
        records.append(entry)
    return records


def consolidate_records(source: Path, destination: Path) -> int:
    """Copy the records of `source` into `destination` as one JSON-lines file and one safetensors
    file (the per-check files of a recording, merged for storage). Returns the number of checks."""
    from safetensors.torch import load_file, save_file

    destination.mkdir(parents=True, exist_ok=True)
    merged: dict[str, torch.Tensor] = {}
    lines = []
    path = source / RECORD_FILE
    for n, line in enumerate(path.read_text().splitlines() if path.exists() else []):
        entry = json.loads(line)
        if entry.get("tensors"):
            prefix = f"c{n}."
            merged.update({prefix + k: v for k, v in load_file(str(source / Path(entry["tensors"]).name)).items()})
            entry["tensors"], entry["prefix"] = "checks.safetensors", prefix
        lines.append(json.dumps(entry))
    save_file(merged, str(destination / "checks.safetensors"))
    (destination / RECORD_FILE).write_text("".join(line + "\n" for line in lines))
    return len(lines)


def replay_check(kind: str, actual: Any, expected: Any, options: dict) -> str | None:
    """Run one recorded check again, here; None if it passes, else its message."""
    checks = {"close": assert_tensor_close, "shape": _replay_shape, "sequence": assert_sequence_equal,
              "equal": assert_equal, "number": assert_number_close, "true": _replay_true,
              "raises": _replay_raises}
    if kind not in checks:
        return f"unknown check kind {kind!r}"
    previous, grading._recorder = grading._recorder, None  # replaying records nothing
    try:
        checks[kind](actual, expected, **options)
    except AssertionError as error:
        return str(error)
    finally:
        grading._recorder = previous
    return None


def _replay_shape(actual: Any, expected: Any, name: str = "output", hint: str | None = None) -> None:
    if isinstance(actual, torch.Tensor):  # recorded as the shape of the learner's tensor
        actual = torch.empty(actual.tolist(), device="meta")
    _check_shape(actual, expected, name, hint)


def _replay_true(actual: Any, expected: Any, message: str = "") -> None:
    if actual is not True:
        _fail(message)


def _replay_raises(actual: Any, expected: Any, name: str = "call", hint: str | None = None) -> None:
    if actual != f"raised {expected}":
        outcome = "returned normally" if actual == "returned" else actual if isinstance(actual, str) else repr(actual)
        _fail(_raises_message(name, expected, outcome, hint))
