"""grader/verdicts.py: a recorded value no check can handle, records outside the schema, the stored reference."""

from __future__ import annotations

import json

import torch

from grader import replay, verdicts


def test_a_recorded_value_no_check_can_handle_fails_that_check_instead_of_stopping_the_grader():
    reference = [{"cell": "a", "index": 0, "kind": "shape", "actual": torch.tensor([2, 3]), "expected": [2, 3],
                  "options": {"name": "out", "hint": None}}]
    forged = [{**reference[0], "actual": torch.tensor([-1, 3])}]  # torch.empty([-1, 3]) raises RuntimeError
    failure, _ = verdicts.compare(reference, forged)["a"]
    assert failure is not None
    assert "expected shape" in failure or "cannot be checked" in failure, failure
    odd = [{**reference[0], "actual": torch.tensor([[1.5]])}]
    assert verdicts.compare(reference, odd)["a"][0] is not None


def test_records_outside_the_schema_score_their_cell_0_and_never_raise(tmp_path):
    """Every line of a records file is read through one schema: a record without a cell, of an
    unknown kind, with a bad index, options or value tag, or a line that is not JSON, becomes an
    'unreadable record' charged to its cell (or the record before it); the comparator and the
    gradebook step never raise on it."""

    from course_lib.grading import RECORD_FILE
    from grader.records import UNREADABLE, read_records

    good = {"cell": "softmax_visible", "index": 0, "kind": "equal", "actual": {"value": 1},
            "expected": {"withheld": True}, "options": {"name": "x"}, "tensors": None}
    lines = [json.dumps(good),
             json.dumps({k: v for k, v in good.items() if k != "cell"}),          # no cell: the one before
             json.dumps({**good, "cell": "cross_entropy_visible", "kind": "eval"}),
             json.dumps({**good, "cell": "a", "index": True}),
             json.dumps({**good, "cell": "b", "actual": {"pickle": "gASV"}}),
             json.dumps({**good, "cell": "c", "options": {"hint": ["a list"]}}),
             json.dumps({**good, "cell": "d", "actual": {"tensor": "t9"}}),          # no such tensor
             json.dumps({**good, "cell": "e", "actual": {"list": [{"list": []}] * 3, "x": 1}}),
             "not json at all {", "[1, 2]"]
    (tmp_path / RECORD_FILE).write_text("\n".join(lines) + "\n")
    records = read_records(tmp_path)
    assert records[0]["actual"] == 1
    assert records[0]["kind"] == "equal"
    unreadable = [(r["cell"], r["actual"]) for r in records if r["kind"] == UNREADABLE]
    assert [cell for cell, _ in unreadable] == ["softmax_visible", "cross_entropy_visible", "a", "b", "c", "d", "e",
                                                "e", "e"]
    assert "without cell" in unreadable[0][1], unreadable
    assert "unknown kind 'eval'" in unreadable[1][1], unreadable
    reference = [{**good, "expected": 1, "actual": 1},
                 {**good, "cell": "cross_entropy_visible", "expected": 1, "actual": 1}]
    results = verdicts.compare(reference, records)
    assert results["softmax_visible"][0].startswith("unreadable record: a record without cell"), results
    assert verdicts.UNREADABLE_RECORD in results["cross_entropy_visible"][1]
    assert replay.out_of_order(records, ["softmax_visible", "cross_entropy_visible"]) != []
