"""course_lib.profiling: exact memory records, and timings compared in alternating rounds."""

from __future__ import annotations

import pytest
import torch

from course_lib.profiling import interleaved_seconds, record_memory


def test_record_memory_sees_the_largest_new_tensor():
    with record_memory() as mem:
        out = torch.zeros(3, 5) + 1
    assert out.shape == (3, 5)
    assert mem.largest_shape == (3, 5)
    assert mem.largest_numel == 15


def test_interleaved_seconds_alternates_the_calls_and_skips_the_warmup():
    order = []
    seconds = interleaved_seconds({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                                  rounds=3, warmup=1)
    assert order == ["a", "b"] * 4  # one warm-up round, then three timed ones, alternating
    assert set(seconds) == {"a", "b"}
    assert all(s >= 0 for s in seconds.values())


def test_interleaved_seconds_takes_the_median_round(monkeypatch):
    clock = iter([0.0, 1.0, 1.0, 1.5, 1.5, 11.5])  # three rounds of one call: 1 s, 0.5 s, 10 s
    monkeypatch.setattr("course_lib.profiling.time.perf_counter", lambda: next(clock))
    assert interleaved_seconds({"a": lambda: None}, rounds=3, warmup=0) == {"a": 1.0}


@pytest.mark.parametrize(("kwargs", "says"), [
    (dict(rounds=0), "rounds must be an int >= 1"),
    (dict(rounds=2.5), "rounds must be an int >= 1"),
    (dict(warmup=-1), "warmup must be an int >= 0"),
])
def test_interleaved_seconds_refuses_bad_counts(kwargs, says):
    with pytest.raises(ValueError, match=says):
        interleaved_seconds({"a": lambda: None}, **kwargs)


def test_interleaved_seconds_needs_a_call():
    with pytest.raises(ValueError, match="at least one call"):
        interleaved_seconds({})
