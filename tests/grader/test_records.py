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
        assert_shape([2, 3], expect=lambda: (2, 3), name="out")
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
    assert_sequence_equal(fake, expect=lambda: [5, 7], name="merge([1, 2], (1, 2), 5)")  # fooled here...
    (record,) = read_records(recording)
    message = replay_check(record["kind"], record["actual"], record["expected"], record["options"])
    assert message is not None
    assert "merge([1, 2], (1, 2), 5)" in message


def test_checks_are_recorded_only_inside_an_announced_cell_and_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(grading, "_recorder", None)
    monkeypatch.delenv(grading.RECORD_ENV, raising=False)
    begin_checks("softmax_visible")
    assert_tensor_close(torch.ones(2), expect=lambda: torch.ones(2))
    assert grading._recorder is None, "without COURSE_GRADING_RECORD nothing is recorded"
    monkeypatch.setenv(grading.RECORD_ENV, str(tmp_path))
    assert_tensor_close(torch.ones(2), expect=lambda: torch.ones(2))
    assert read_records(tmp_path) == [], "a check outside an announced cell must not be recorded"
    begin_checks("softmax_visible")
    assert_tensor_close(torch.ones(2), expect=lambda: torch.ones(2), atol=0.5, name="ones")
    begin_checks("softmax_hidden")
    assert_shape(torch.ones(2, 3), expect=lambda: (2, 3), name="shape")
    records = read_records(tmp_path)
    assert [(r["cell"], r["index"], r["kind"]) for r in records] == [
        ("softmax_visible", 0, "close"), ("softmax_hidden", 0, "shape")]
    assert records[0]["options"]["atol"] == 0.5
    assert records[0]["options"]["name"] == "ones"
    monkeypatch.setattr(grading, "_recorder", None)


def test_a_failing_check_is_recorded_before_it_raises(recording):
    begin_checks("cell")
    with pytest.raises(AssertionError, match="expected 0.5, got 0.75"):
        assert_number_close(0.75, expect=lambda: 0.5, name="p")
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
    assert_equal([1, 2.0], expect=lambda: [1, 2])
    assert_equal(torch.tensor([1, 2]), expect=lambda: torch.tensor([1, 2]))
    for actual, expected in [((1, 2), [1, 2]), (True, 1), ([AlwaysEqual()], [1]), (AlwaysEqual(), 3),
                             (torch.tensor([1, 3]), torch.tensor([1, 2])), ([1, 2], torch.tensor([1, 2]))]:
        with pytest.raises(AssertionError, match="expected"):
            assert_equal(actual, expect=lambda e=expected: e, name="value")


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


def test_the_replay_of_an_unanswered_exercise_says_so_without_the_hint():
    """The record of a call that raised NotImplementedError (the stub) holds no message; its replay
    says the exercise is not written yet, never the hint written for another mistake."""
    from course_lib.grading_env import UNWRITTEN

    message = replay_check("raises", "raised NotImplementedError", "ValueError",
                           {"name": "MiniGPT(alibi)", "hint": "raise ValueError for 'alibi'"})
    assert message.startswith(f"MiniGPT(alibi) raised NotImplementedError: its exercise {UNWRITTEN}")
    assert "alibi'" not in message
    assert replay_check("raises", "raised NotImplementedError", "NotImplementedError", {"name": "f"}) is None


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


def _graded(records):
    """Records as a graded kernel writes them: observations only, every expected value WITHHELD."""
    return [{**r, "expected": grading.WITHHELD} for r in records]


def test_compare_passes_a_run_that_matches_the_reference():
    assert verdicts.compare(REFERENCE, _graded(REFERENCE)) == {"a": (None, []), "b": (None, [])}


def test_compare_fails_missing_extra_and_reordered_checks():
    missing = verdicts.compare(REFERENCE, _graded(REFERENCE[:1]))
    assert missing["a"][0].startswith("1 of its 2 checks ran; the next one is 'second'")
    assert missing["b"][0].startswith("0 of its 1 checks ran")
    extra = verdicts.compare(REFERENCE, _graded([*REFERENCE, _record("a", "number", 1.0, 1.0)]))
    assert extra["a"][0] == "3 checks ran where the reference makes 2"
    swapped = verdicts.compare(REFERENCE, _graded([REFERENCE[1], REFERENCE[0], REFERENCE[2]]))
    assert "another kind" in swapped["a"][0]


def test_compare_judges_with_the_references_options_and_quotes_the_learners_value():
    loose = _graded([_record("a", "number", 1.5, 1.0, name="renamed", atol=10.0), *REFERENCE[1:]])  # options from the kernel
    failure, notes = verdicts.compare(REFERENCE, loose)["a"]
    assert failure is not None
    assert failure.startswith("first: expected 1, got 1.5")
    assert notes == [], "a wrong value is an ordinary failure: no flag"


def test_a_kernel_that_computed_expected_values_is_noted_and_judged_by_the_replay_alone():
    """A graded kernel never computes an expected value; one that did (expected values turned on
    by the answer, or a run outside make autograde) gets a note, and its own values count for nothing."""
    agrees_with_itself = [_record("a", "number", 5.0, 5.0), *REFERENCE[1:]]
    failure, notes = verdicts.compare(REFERENCE, agrees_with_itself)["a"]
    assert failure is not None
    assert failure.startswith("first: expected 1, got 5")
    assert notes == [verdicts.EXPECTED_IN_KERNEL]


def test_checks_record_only_the_observation_while_a_submission_is_graded(recording, monkeypatch):
    """With expected values withheld, no check calls its expect= function: it records the
    learner's value with WITHHELD and judges nothing."""
    monkeypatch.setattr(grading, "_WITHHOLD", True)
    called = []

    def expect():
        called.append(1)
        return torch.zeros(7)

    begin_checks("cell-1")
    assert_tensor_close(torch.ones(2), expect=expect)  # would fail against any expected value
    assert_shape(torch.ones(2, 3), expect=expect)
    assert_equal("anything", expect=expect)
    assert_number_close(3.0, expect=expect)
    assert_sequence_equal([1], expect=expect)
    assert not grading.expecting()
    assert called == [], "an expect= function ran while a submission was graded"
    records = read_records(recording)
    assert [r["kind"] for r in records] == ["close", "shape", "equal", "number", "sequence"]
    assert all(r["expected"] is grading.WITHHELD for r in records)
    assert records[1]["actual"].tolist() == [2, 3]


def test_a_check_given_an_expected_value_instead_of_a_function_says_how_to_write_it():
    with pytest.raises(TypeError, match="expect=lambda"):
        assert_equal(3, expect=3)
    with pytest.raises(TypeError):
        assert_equal(3, 3)  # the expected value is keyword-only


def test_hidden_seed_is_the_notebooks_own_unless_a_batch_sets_one(monkeypatch):
    monkeypatch.delenv(grading.SEED_ENV, raising=False)
    assert [grading.hidden_seed(n) for n in (0, 1, 5)] == [0, 1, 5]
    monkeypatch.setenv(grading.SEED_ENV, "0")
    assert grading.hidden_seed(5) == 5
    monkeypatch.setenv(grading.SEED_ENV, "1234")
    drawn = [grading.hidden_seed(n) for n in (0, 1, 5)]
    assert len(set(drawn)) == 3
    assert drawn != [0, 1, 5]
    assert drawn == [grading.hidden_seed(n) for n in (0, 1, 5)], "the same batch draws the same inputs"
    monkeypatch.setenv(grading.SEED_ENV, "1235")
    assert [grading.hidden_seed(n) for n in (0, 1, 5)] != drawn, "another batch draws other inputs"


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
    monkeypatch.setattr(grading, "_WITHHOLD", True)  # the answer turns expected values on
    exec(grading.announcement("cell-3"), namespace)  # noqa: S102
    assert "course_lib.grading._WITHHOLD" in read_records(recording)[-1]["actual"]
    failure, notes = verdicts.compare(reference, learner)["cell-2"]
    assert failure is None, "the machinery record is not a check"
    assert notes == [f"{verdicts.MACHINERY}: {', '.join(changed)}"]


def test_a_failed_property_is_told_in_the_words_of_the_learners_own_kernel():
    """An assert_true message quotes what the learner's code did (the tensor it made under a
    memory cap), so the feedback quotes the learner's run, not the instructor's."""
    reference = [_record("m", "true", True, True, message="largest tensor (256, 8): over the cap")]
    learner = _graded([_record("m", "true", False, True, message="largest tensor (256, 256): over the cap")])
    failure, notes = verdicts.compare(reference, learner)["m"]
    assert failure == "largest tensor (256, 256): over the cap"
    assert notes == []
    close = _graded([_record("c", "close", torch.tensor([1.0, 2.5]), torch.tensor([1.0, 2.0]),
                             rtol=1e-5, atol=1e-6, name="reference name")])
    failure, _ = verdicts.compare([_record("c", "close", torch.ones(2), torch.tensor([1.0, 2.0]), rtol=1e-5,
                                           atol=1e-6, name="out")], close)["c"]
    assert "got 2.5, expected 2" in failure, failure
    assert failure.startswith("out: 1 of 2 values differ"), "names and tolerances are the reference's"
