"""grader/replay.py: records written where the learner's code could write are read as untrusted data."""

from __future__ import annotations

import os
import threading

from grader import replay


def test_a_fifo_or_a_link_in_the_records_folder_is_refused_without_reading_it(tmp_path):
    records = tmp_path / "checks"
    records.mkdir()
    (records / "checks.jsonl").write_text("")
    os.mkfifo(records / "extra.jsonl")
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(replay.learner_records(tmp_path)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert outcome, "reading records with a FIFO among them blocked the grader"
    assert isinstance(outcome[0], str)
    assert "'extra.jsonl', which is not a regular file" in outcome[0]
    os.unlink(records / "extra.jsonl")
    (records / "checks.jsonl").unlink()
    os.mkfifo(records / "checks.jsonl")  # the file the grader reads, as a FIFO: no writer ever comes
    reader = threading.Thread(target=lambda: outcome.append(replay.learner_records(tmp_path)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert len(outcome) == 2, "a FIFO in place of the records file blocked the grader"
    assert "not a regular file" in outcome[1]


def test_records_over_the_size_bound_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_SANDBOX_RUNTIME_BYTES", "1000")
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "checks.jsonl").write_text("x" * 2000)
    assert "more than the 1,000 allowed" in replay.learner_records(tmp_path)


def test_records_not_written_by_the_recorder_are_named_by_their_cell():
    """The recorder writes the test cells in the notebook's order, each in one block numbered
    from 0: a record ahead of its turn, repeated, or for a cell without checks is someone else's."""
    def records(*cells):
        return [{"cell": cell, "index": index} for cell, index in cells]

    order = ["softmax_visible", "softmax_hidden", "cross_entropy_visible"]
    honest = records(("softmax_visible", 0), ("softmax_visible", 1), ("softmax_hidden", 0), ("cross_entropy_visible", 0))
    assert replay.out_of_order(honest, order) == []
    ahead = records(("cross_entropy_visible", 0), ("softmax_visible", 0), ("softmax_hidden", 0))
    assert replay.out_of_order(ahead, order) == ["cross_entropy_visible"]
    repeated = records(("softmax_visible", 0), ("softmax_visible", 0))
    assert replay.out_of_order(repeated, order) == ["softmax_visible"]
    unknown = records(("softmax_visible", 0), ("made_up", 0))
    assert replay.out_of_order(unknown, order) == ["made_up"]
