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
    _check_shape,
    _fail,
    _raises_message,
    assert_equal,
    assert_number_close,
    assert_sequence_equal,
    assert_tensor_close,
)
from course_lib.grading_env import RECORD_FILE

#: The tags `encode_value` writes (course_lib.grading).
_TAGS = frozenset({"tensor", "value", "float", "bytes", "list", "tuple", "dict", "opaque", "withheld"})


class Opaque:
    """A recorded value of a type the record does not keep; equal to nothing."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<a {self.type_name} object>"


_MAX_DEPTH = 32


def decode_value(encoded: Any, tensors: dict[str, torch.Tensor], depth: int = 0) -> Any:
    """The inverse of `encode_value`, and the schema of a recorded value: anything `encode_value`
    does not write (an unknown tag, a payload of another type, a missing tensor, nesting deeper than
    _MAX_DEPTH) raises ValueError with what is wrong."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"a value nested more than {_MAX_DEPTH} deep")
    if not isinstance(encoded, dict) or len(encoded) != 1:
        raise ValueError("a value that is not a one-key object")
    (tag, payload), = encoded.items()
    if tag == "tensor" and isinstance(payload, str) and payload in tensors:
        return tensors[payload]
    if tag == "value" and (payload is None or type(payload) in (bool, int, str)):
        return payload
    if tag == "float" and isinstance(payload, str):
        return float(payload)
    if tag == "bytes" and isinstance(payload, str):
        return bytes.fromhex(payload)
    if tag in ("list", "tuple") and isinstance(payload, list):
        items = [decode_value(v, tensors, depth + 1) for v in payload]
        return items if tag == "list" else tuple(items)
    if tag == "dict" and isinstance(payload, list) and all(isinstance(p, list) and len(p) == 2 for p in payload):
        return {decode_value(k, tensors, depth + 1): decode_value(v, tensors, depth + 1) for k, v in payload}
    if tag == "opaque" and isinstance(payload, str):
        return Opaque(payload)
    if tag == "withheld" and payload is True:
        return grading.WITHHELD
    raise ValueError(f"a malformed {str(tag)[:40]!r} value" if tag in _TAGS else f"an unknown value tag {str(tag)[:40]!r}")


#: The kinds of record the recorder writes (course_lib.grading): checks, and two side records.
KINDS = frozenset({"close", "shape", "sequence", "equal", "number", "true", "raises", "machinery"})
#: A record that failed the schema (`validate_record`): its cell scores 0 and is flagged.
UNREADABLE = "unreadable"
_KEYS = frozenset({"cell", "index", "kind", "actual", "expected", "options", "tensors", "prefix"})


def validate_record(entry: Any) -> str | None:
    """Why one line of a records file is not a record the recorder writes, or None. With
    `decode_value` (the schema of its two values), the one schema every record is read through,
    the instructor's and a submission's alike: an object with a cell name, a non-negative index, a
    known kind, options of plain values, and where its tensors are."""
    if not isinstance(entry, dict):
        return "a record that is not an object"
    if missing := {"cell", "index", "kind", "actual", "expected"} - entry.keys():
        return f"a record without {', '.join(sorted(missing))}"
    if extra := entry.keys() - _KEYS:
        return f"a record with unknown fields ({', '.join(sorted(map(str, extra)))[:80]})"
    if not isinstance(entry["cell"], str) or not 0 < len(entry["cell"]) <= 200:
        return "a record whose cell is not a name"
    if type(entry["index"]) is not int or entry["index"] < 0:
        return "a record whose index is not a non-negative integer"
    if entry["kind"] not in KINDS:
        return f"a record of unknown kind {str(entry['kind'])[:40]!r}"
    options = entry.get("options", {})
    if not isinstance(options, dict) or not all(
            isinstance(k, str) and (v is None or type(v) in (bool, int, float, str)) for k, v in options.items()):
        return "a record whose options are not plain values by name"
    if not isinstance(entry.get("tensors"), (str, type(None))) or not isinstance(entry.get("prefix", ""), str):
        return "a record whose tensor file is not a name"
    return None


def read_records(folder: Path) -> list[dict]:
    """Every check recorded in `folder`, with its values decoded. Nothing in the folder can make
    this raise past its own checks: a line that is not a valid record (`validate_record`) becomes a
    record of kind UNREADABLE, with the cell of the line (or of the record before it) and the
    problem, which scores that cell 0 (grader/verdicts.py)."""
    from safetensors.torch import load_file

    path = folder / RECORD_FILE
    if not path.exists():
        return []
    files: dict[str, dict[str, torch.Tensor]] = {}
    records: list[dict] = []
    for line in path.read_text(errors="replace").splitlines():
        entry: Any = None
        try:
            entry = json.loads(line)
            tensors: dict[str, torch.Tensor] = {}
            if isinstance(entry, dict) and isinstance(entry.get("tensors"), str) and entry["tensors"]:
                name = Path(entry["tensors"]).name  # never a path out of the folder
                if name not in files:
                    files[name] = load_file(str(folder / name))
                prefix = entry.get("prefix", "")
                if isinstance(prefix, str):
                    tensors = {k[len(prefix):]: v for k, v in files[name].items() if k.startswith(prefix)}
            problem = validate_record(entry)
            if problem is None:
                entry["options"] = entry.get("options", {})
                for field in ("actual", "expected"):
                    try:
                        entry[field] = decode_value(entry[field], tensors)
                    except ValueError as error:
                        problem = f"a record whose {field} value is {error}"
                        break
                else:
                    records.append(entry)
                    continue
        except Exception as error:  # noqa: BLE001 (a records file can hold anything)
            problem = f"a line that cannot be read ({type(error).__name__}: {str(error)[:80]})"
        cell = entry.get("cell") if isinstance(entry, dict) else None
        if not isinstance(cell, str) or not 0 < len(cell) <= 200:
            cell = records[-1]["cell"] if records else None
        records.append({"cell": cell, "index": -1, "kind": UNREADABLE, "actual": problem, "expected": None,
                        "options": {}, "tensors": None})
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
    withhold, grading._WITHHOLD = grading._WITHHOLD, False  # the grader holds the expected value
    try:
        if kind in ("close", "sequence", "equal", "number"):
            checks[kind](actual, expect=lambda: expected, **options)
        else:
            checks[kind](actual, expected, **options)
    except AssertionError as error:
        return str(error)
    finally:
        grading._recorder, grading._WITHHOLD = previous, withhold
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
