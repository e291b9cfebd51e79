"""Recording checks while grading, and replaying them in the grader's process (grader/verdicts.py).

The grader trusts only what it replays itself: a recorded value of an unknown type never equals
anything, a check that did not run is missing, and the replay gives the notebook's own message.
"""

import math

import pytest
import torch

from course_lib import grading
from course_lib.grading import (
    assert_equal,
    assert_number_close,
    assert_raises,
    assert_sequence_equal,
    assert_shape,
    assert_tensor_close,
    assert_true,
    begin_checks,
    encode_value,
)
from grader import verdicts
from grader.records import Opaque, decode_value, read_records, replay_check


class AlwaysEqual:
    """What a learner could return to pass `==` checks in their own process."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


@pytest.fixture
def recording(tmp_path, monkeypatch):
    monkeypatch.setenv(grading.RECORD_ENV, str(tmp_path))
    monkeypatch.setattr(grading, "_recorder", None)
    yield tmp_path
    monkeypatch.setattr(grading, "_recorder", None)


def test_values_survive_encoding_with_their_exact_types():
    value = {"ids": [1, 2, 3], "pair": (b"a", b"b"), "none": None, "flag": True,
             "nan": math.nan, "inf": -math.inf, "t": torch.arange(6.0).reshape(2, 3)}
    tensors = {}
    decoded = decode_value(encode_value(value, tensors), tensors)
    assert decoded.keys() == value.keys()
    assert decoded["ids"] == [1, 2, 3]
    assert type(decoded["pair"]) is tuple
    assert decoded["pair"] == (b"a", b"b")
    assert decoded["none"] is None
    assert decoded["flag"] is True
    assert math.isnan(decoded["nan"])
    assert decoded["inf"] == -math.inf
    assert torch.equal(decoded["t"], value["t"])


def test_a_shape_check_on_a_non_tensor_is_replayed_as_a_failure(recording):
    begin_checks("cell")
    with pytest.raises(AssertionError, match="expected a torch.Tensor, got list"):
        assert_shape([2, 3], (2, 3), name="out")
    (record,) = read_records(recording)
    assert "expected a torch.Tensor" in replay_check("shape", record["actual"], [2, 3], {"name": "out"})


def test_objects_of_other_types_are_recorded_as_opaque_and_equal_nothing():
    tensors = {}
    decoded = decode_value(encode_value([AlwaysEqual(), 3], tensors), tensors)
    assert isinstance(decoded[0], Opaque)
    assert decoded[1] == 3
    assert decoded[0] != decoded[0]
    assert not (decoded[0] == 3)
    assert "AlwaysEqual" in repr(decoded[0])


def test_an_always_equal_answer_passes_in_process_but_fails_the_replay(recording):
    fake = [AlwaysEqual(), AlwaysEqual()]
    begin_checks("merge_hidden")
    assert_sequence_equal(fake, [5, 7], name="merge([1, 2], (1, 2), 5)")  # fooled here...
    (record,) = read_records(recording)
    message = replay_check(record["kind"], record["actual"], record["expected"], record["options"])
    assert message is not None
    assert "merge([1, 2], (1, 2), 5)" in message


def test_checks_are_recorded_only_inside_an_announced_cell_and_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(grading, "_recorder", None)
    monkeypatch.delenv(grading.RECORD_ENV, raising=False)
    begin_checks("softmax_visible")
    assert_tensor_close(torch.ones(2), torch.ones(2))
    assert grading._recorder is None, "without COURSE_GRADING_RECORD nothing is recorded"
    monkeypatch.setenv(grading.RECORD_ENV, str(tmp_path))
    assert_tensor_close(torch.ones(2), torch.ones(2))
    assert read_records(tmp_path) == [], "a check outside an announced cell must not be recorded"
    begin_checks("softmax_visible")
    assert_tensor_close(torch.ones(2), torch.ones(2), atol=0.5, name="ones")
    begin_checks("softmax_hidden")
    assert_shape(torch.ones(2, 3), (2, 3), name="shape")
    records = read_records(tmp_path)
    assert [(r["cell"], r["index"], r["kind"]) for r in records] == [
        ("softmax_visible", 0, "close"), ("softmax_hidden", 0, "shape")]
    assert records[0]["options"]["atol"] == 0.5
    assert records[0]["options"]["name"] == "ones"
    monkeypatch.setattr(grading, "_recorder", None)


def test_a_failing_check_is_recorded_before_it_raises(recording):
    begin_checks("cell")
    with pytest.raises(AssertionError, match="expected 0.5, got 0.75"):
        assert_number_close(0.75, 0.5, name="p")
    (record,) = read_records(recording)
    assert record["actual"] == 0.75
    assert record["expected"] == 0.5


@pytest.mark.parametrize(("check", "args", "wrong"), [
    ("close", (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])), torch.tensor([1.0, 2.5])),
    ("shape", (torch.tensor([2, 3]), [2, 3]), torch.tensor([3, 2])),
    ("sequence", ([1, 2, 3], [1, 2, 3]), [1, 2]),
    ("equal", ({"a": (1, 2)}, {"a": (1, 2)}), {"a": [1, 2]}),
    ("number", (0.1 + 0.2, 0.3), 0.31),
    ("true", (True, True), False),
    ("raises", ("raised ValueError", "ValueError"), "returned"),
])
def test_replay_passes_the_right_value_and_fails_a_wrong_one(check, args, wrong):
    options = {"message": "the property"} if check == "true" else {"name": "x"}
    assert replay_check(check, args[0], args[1], options) is None
    message = replay_check(check, wrong, args[1], options)
    assert message
    assert ("the property" in message if check == "true" else message.startswith("x"))


def test_assert_equal_is_strict_about_types_and_never_calls_a_learners_eq():
    assert_equal([1, 2.0], [1, 2])
    assert_equal(torch.tensor([1, 2]), torch.tensor([1, 2]))
    for actual, expected in [((1, 2), [1, 2]), (True, 1), ([AlwaysEqual()], [1]), (AlwaysEqual(), 3),
                             (torch.tensor([1, 3]), torch.tensor([1, 2])), ([1, 2], torch.tensor([1, 2]))]:
        with pytest.raises(AssertionError, match="expected"):
            assert_equal(actual, expected, name="value")


def test_assert_raises_reports_what_happened_instead():
    def returns():
        return 1

    def wrong_error():
        raise TypeError("bad type")

    assert isinstance(assert_raises(ValueError, int, "x"), ValueError)
    with pytest.raises(AssertionError, match=r"returns\(\.\.\.\) must raise ValueError; it returned normally"):
        assert_raises(ValueError, returns)
    with pytest.raises(AssertionError, match="it raised TypeError: bad type. Hint: check the mask"):
        assert_raises(ValueError, wrong_error, hint="check the mask")
    with pytest.raises(grading.ForbiddenCallError):  # forbid's own message goes through
        with grading.forbid(torch.softmax):
            assert_raises(ValueError, torch.softmax, torch.ones(2), 0)


def test_assert_true_accepts_only_true():
    assert_true(True, "fine")
    assert_true(torch.tensor(True), "fine")
    for condition in (1, "yes", torch.tensor([True, True]), AlwaysEqual()):
        with pytest.raises(AssertionError, match="the gradient must reach position 0"):
            assert_true(condition, "the gradient must reach position 0")


def _record(cell, kind, actual, expected, **options):
    return {"cell": cell, "kind": kind, "actual": actual, "expected": expected, "options": options}


REFERENCE = [_record("a", "number", 1.0, 1.0, name="first"), _record("a", "equal", [1], [1], name="second"),
             _record("b", "close", torch.ones(2), torch.ones(2), rtol=1e-5, atol=1e-6, name="tensor")]


def test_compare_passes_a_run_that_matches_the_reference():
    assert verdicts.compare(REFERENCE, REFERENCE) == {"a": (None, []), "b": (None, [])}


def test_compare_fails_missing_extra_and_reordered_checks():
    missing = verdicts.compare(REFERENCE, REFERENCE[:1])
    assert missing["a"][0].startswith("1 of its 2 checks ran; the next one is 'second'")
    assert missing["b"][0].startswith("0 of its 1 checks ran")
    extra = verdicts.compare(REFERENCE, [*REFERENCE, _record("a", "number", 1.0, 1.0)])
    assert extra["a"][0] == "3 checks ran where the reference makes 2"
    swapped = verdicts.compare(REFERENCE, [REFERENCE[1], REFERENCE[0], REFERENCE[2]])
    assert "another kind" in swapped["a"][0]


def test_compare_judges_with_the_references_options_and_message():
    loose = [_record("a", "number", 1.5, 1.0, name="renamed", atol=10.0), *REFERENCE[1:]]  # options from the kernel
    failure, _ = verdicts.compare(REFERENCE, loose)["a"]
    assert failure is not None
    assert failure.startswith("first: expected 1, got 1.5")


def test_other_inputs_score_zero_and_are_flagged_whatever_the_kernel_computed():
    """An expected value computed in the kernel that differs from the instructor's run means the
    test ran on other inputs (tampered values, or a drawn random state): the cell fails, with a
    note that names why, even when the learner's value matches the kernel's expected value."""
    drifted = [_record("a", "number", 5.0, 5.0), *REFERENCE[1:]]  # "right" for other inputs
    failure, notes = verdicts.compare(REFERENCE, drifted)["a"]
    assert failure is not None
    assert "other inputs than the instructor's run" in failure, failure
    assert notes == [verdicts.JUDGED_IN_KERNEL, verdicts.OTHER_INPUTS]
    drifted_and_wrong = [_record("a", "number", 4.0, 5.0), *REFERENCE[1:]]  # failed in the kernel too
    failure, notes = verdicts.compare(REFERENCE, drifted_and_wrong)["a"]
    assert failure is not None
    assert notes == [verdicts.JUDGED_IN_KERNEL], "an answer that failed against its own kernel's value is an ordinary failure"
    untouched = verdicts.compare(REFERENCE, REFERENCE)["a"]
    assert untouched == (None, [])


def _inputs(cell, label, **digests):
    return {"cell": cell, "kind": "inputs", "actual": label, "expected": digests, "options": {}}


def _numbered(records):
    """Records as the recorder numbers them: 0, 1, 2, ... within each cell."""
    counts = {}
    for record in records:
        record["index"] = counts[record["cell"]] = counts.get(record["cell"], -1) + 1
    return records


def test_a_withheld_expected_value_is_judged_against_the_reference_alone():
    """While grading, the kernel records WITHHELD as every expected value: the verdict is the
    reference's, and the inputs records say whether the test ran on the instructor's inputs."""
    reference = _numbered([_inputs("a", "f", **{"0": "aaaa"}), *(dict(r) for r in REFERENCE[:2]),
                           _inputs("a", "f", **{"0": "cccc"})])
    right = _numbered([_inputs("a", "f", **{"0": "aaaa"}), _record("a", "number", 1.0, grading.WITHHELD),
                       _record("a", "equal", [1], grading.WITHHELD), _inputs("a", "f", **{"0": "cccc"})])
    assert verdicts.compare(reference, right)["a"] == (None, [])
    wrong = _numbered([right[0], _record("a", "number", 2.0, grading.WITHHELD), *right[2:]])
    failure, notes = verdicts.compare(reference, wrong)["a"]
    assert failure.startswith("first: expected 1, got 2"), failure
    assert notes == [], "a wrong value on the instructor's inputs is an ordinary failure: no flag"
    drifted = _numbered([_inputs("a", "f", **{"0": "bbbb"}), *wrong[1:]])
    failure, notes = verdicts.compare(reference, drifted)["a"]
    assert "other inputs than the instructor's run" in failure, failure
    assert "argument 0" in failure, failure
    assert notes == [verdicts.OTHER_INPUTS]
    assert verdicts.compare(reference, [drifted[0], *right[1:]])["a"] == (None, []), \
        "other inputs with every check passing is no failure"
    later = _numbered([*wrong[:3], _inputs("a", "f", **{"0": "dddd"})])
    assert verdicts.compare(reference, later)["a"][1] == [], \
        "inputs after the first failing check may differ because of it: no flag"


def test_checks_given_withheld_record_the_value_and_judge_nothing(recording):
    begin_checks("cell-1")
    assert_tensor_close(torch.ones(2), grading.WITHHELD)  # would fail against any expected value
    assert_shape(torch.ones(2, 3), grading.WITHHELD)
    assert_equal("anything", grading.WITHHELD)
    assert_number_close(3.0, grading.WITHHELD)
    assert_sequence_equal([1], grading.WITHHELD)
    records = read_records(recording)
    assert [r["kind"] for r in records] == ["close", "shape", "equal", "number", "sequence"]
    assert all(r["expected"] is grading.WITHHELD for r in records)
    assert records[1]["actual"].tolist() == [2, 3]


def test_record_inputs_fingerprints_the_arguments_it_is_told_to(recording):
    calls = []

    def f(x, y, scale=1.0):
        calls.append((x, y, scale))
        x.add_(1)  # the learner changes its input in place: recorded before, so it does not show
        return x * scale

    begin_checks("cell-1")
    x = torch.zeros(3)
    grading.record_inputs(f, "f", (0,), ("scale",))(x, torch.ones(2), scale=2.0)
    grading.record_inputs(f, "f", (0,), ("scale",))(torch.zeros(3), torch.ones(2), scale=2.0)
    grading.record_inputs(f, "f", (0,), ("scale",))(torch.zeros(3), torch.ones(2), scale=3.0)
    first, second, third = read_records(recording)
    assert len(calls) == 3
    assert first["kind"] == "inputs"
    assert first["actual"] == "f"
    assert set(first["expected"]) == {"0", "scale"}
    assert first["expected"] == second["expected"], "equal arguments, equal fingerprints"
    assert third["expected"]["scale"] != first["expected"]["scale"]
    assert grading.record_inputs(f, "f", (0,), ()) is not f
    grading._recorder.cell = None
    assert grading.record_inputs(f, "f", (0,), ()) is f, "outside a graded test cell nothing is wrapped"


def test_a_change_to_the_grading_machinery_is_recorded_and_flagged(recording, monkeypatch):
    """Before each test cell the grader records what of torch and the helpers was replaced; the
    verdicts do not depend on it, the instructor is told."""
    namespace = {"assert_tensor_close": assert_tensor_close}
    exec(grading.announcement("cell-1"), namespace)  # noqa: S102
    assert read_records(recording) == [], "nothing changed, nothing recorded"
    monkeypatch.setattr(torch, "isclose", lambda *args, **kwargs: True)
    monkeypatch.setattr(grading.assert_number_close, "__code__", (lambda *args, **kwargs: None).__code__)
    namespace["assert_equal"] = lambda *args, **kwargs: None
    exec(grading.announcement("cell-2"), namespace)  # noqa: S102
    (record,) = read_records(recording)
    assert record["kind"] == "machinery"
    changed = ["course_lib.grading.assert_number_close", "torch.isclose", "the notebook's assert_equal"]
    assert record["actual"] == changed
    reference = [_record("cell-2", "number", 1.0, 1.0)]
    learner = [record, _record("cell-2", "number", 1.0, grading.WITHHELD)]
    failure, notes = verdicts.compare(reference, learner)["cell-2"]
    assert failure is None, "the machinery record is not a check"
    assert notes == [f"{verdicts.MACHINERY}: {', '.join(changed)}"]
