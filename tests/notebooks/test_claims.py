"""Numbers in the prose come from the outputs (issue 41, item 6).

A number that a lesson's markdown states and that one of its code cells prints is either referred
to as printed ("the value printed above") or listed in tests/notebooks/claims.py, and checked
here against the stored output of the solution notebook: re-executing a solution whose numbers
move makes the prose that quotes them fail here. Only JSON is read; nothing is executed.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

from grader.cells import cell_source, lesson_names
from tests.notebooks.claims import CLAIMS, Claim, parse_number

ROOT = Path(__file__).resolve().parents[2]
LESSONS = lesson_names(ROOT)
FIX = "re-word the prose, or widen the range from several executions"


@cache
def _cells(lesson: str) -> tuple[dict, ...]:
    path = ROOT / "solutions" / lesson / f"{lesson}.ipynb"
    return tuple(json.loads(path.read_text())["cells"])


def _text(value) -> str:
    return value if isinstance(value, str) else "".join(value)


def stored_output(cell: dict) -> str:
    """What a code cell printed: its streams and the text/plain of its results, in order."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(_text(out["text"]))
        elif "text/plain" in out.get("data", {}):
            parts.append(_text(out["data"]["text/plain"]))
    return "".join(parts)


def sentence_around(text: str, phrase: str) -> str:
    """The sentence of text that holds phrase, on one line, for a failure message."""
    at, after = text.index(phrase), text.index(phrase) + len(phrase)
    starts = [text.rfind(sep, 0, at) + len(sep) for sep in (". ", "\n\n") if text.rfind(sep, 0, at) >= 0]
    start = max(starts, default=0)
    ends = [text.find(sep, after) + 1 for sep in (". ", "\n\n") if text.find(sep, after) >= 0]
    end = min(ends, default=len(text))
    sentence = " ".join(text[start:end].split())
    return sentence if len(sentence) <= 400 else sentence[:400] + " ..."


def _holding(lesson: str, cell_type: str, phrase: str) -> list[int]:
    return [i for i, c in enumerate(_cells(lesson)) if c["cell_type"] == cell_type and phrase in cell_source(c)]


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_the_prose_number_agrees_with_the_stored_output(claim: Claim):
    where = f"{claim.lesson} ({claim.name})"
    prose_cells = _holding(claim.lesson, "markdown", claim.prose)
    assert len(prose_cells) == 1, (
        f"{where}: the prose {claim.prose!r} is in markdown cells {prose_cells}, not in exactly one: "
        "update the `prose` of this entry in tests/notebooks/claims.py")
    code_cells = _holding(claim.lesson, "code", claim.cell)
    assert len(code_cells) == 1, (
        f"{where}: the code {claim.cell!r} is in code cells {code_cells}, not in exactly one: "
        "update the `cell` of this entry in tests/notebooks/claims.py")
    cells = _cells(claim.lesson)
    sentence = sentence_around(cell_source(cells[prose_cells[0]]), claim.prose)
    printed = stored_output(cells[code_cells[0]])
    pattern = re.compile(claim.output)
    assert pattern.groups == 1, f"{where}: the pattern {claim.output!r} must have exactly one group"
    found = pattern.search(printed)
    assert found, (
        f"{where}: the stored output of code cell {code_cells[0]} no longer shows the number that "
        f"the sentence {sentence!r} quotes (no match for {claim.output!r} in {printed[-600:]!r}): "
        f"{FIX}, and update this entry")
    stored = parse_number(found.group(1)) * claim.scale
    assert claim.agrees(stored), (
        f"{where}: the sentence {sentence!r} (markdown cell {prose_cells[0]}) states "
        f"{claim.stated()}, but code cell {code_cells[0]} stored {stored:g} "
        f"(printed {found.group(1)!r}): {FIX}")


def test_every_claim_names_a_lesson_and_a_unique_name():
    unknown = sorted({c.lesson for c in CLAIMS} - set(LESSONS))
    assert unknown == [], f"claims for lessons that solutions/ does not have: {unknown}"
    ids = [c.id for c in CLAIMS]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    assert repeated == [], f"claims whose lesson and name repeat another's: {repeated}"


@pytest.mark.parametrize(
    ("claim", "stored", "agrees"),
    [
        (Claim("x", "v", "p", "c", "(1)", value=2.0, abs_tol=0.1), 2.1, True),
        (Claim("x", "v", "p", "c", "(1)", value=2.0, abs_tol=0.1), 2.11, False),
        (Claim("x", "v", "p", "c", "(1)", value=100, rel_tol=0.05, abs_tol=1), 95, True),
        (Claim("x", "v", "p", "c", "(1)", value=100, rel_tol=0.05), 94.9, False),
        (Claim("x", "r", "p", "c", "(1)", low=5, high=7, abs_tol=0.5), 7.4, True),
        (Claim("x", "r", "p", "c", "(1)", low=5, high=7), 7.01, False),
        (Claim("x", "r", "p", "c", "(1)", low=5, high=7), 4.99, False),
    ],
)
def test_a_claim_agrees_within_its_tolerance_or_range_only(claim, stored, agrees):
    assert claim.agrees(stored) is agrees


def test_a_claim_has_a_value_or_a_range_and_printed_numbers_parse():
    with pytest.raises(ValueError, match="not both"):
        Claim("x", "n", "p", "c", "(1)", value=1.0, low=0, high=2)
    with pytest.raises(ValueError, match="not both"):
        Claim("x", "n", "p", "c", "(1)")
    with pytest.raises(ValueError, match="low <= high"):
        Claim("x", "n", "p", "c", "(1)", low=2, high=1)
    assert [parse_number(s) for s in ("1,115,394", "\u22120.98", "1.16e+09", "-5.0971")] == [
        1_115_394, -0.98, 1.16e9, -5.0971]
