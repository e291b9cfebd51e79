"""grader/reference.py: the stored reference is used only on a machine like the one that made it, else
the solution runs here once."""

from __future__ import annotations

from grader import reference


def test_the_stored_reference_is_used_only_on_a_machine_like_the_one_that_made_it(tmp_path, monkeypatch):
    """float32 results differ in the last bits across CPUs and library versions (lesson 10's logits by
    1.3e-5 between an AMD EPYC (AVX2) and an Intel Xeon, torch 2.13 and 2.11): a right answer is judged
    against the solution run on the machine that grades it, never against another machine's run."""
    solution = tmp_path / "solutions" / "00_setup" / "00_setup.ipynb"
    solution.parent.mkdir(parents=True)
    solution.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    stored = reference.stored_reference(tmp_path, "00_setup", solution.name)
    stored.mkdir(parents=True)
    monkeypatch.setattr(reference, "reference_key", lambda path: "k1")
    monkeypatch.setattr(reference, "read_records", lambda folder: [str(folder)])
    runs = []

    def run_reference(path, folder, use_sandbox=True, env=None):
        runs.append((folder, env))
        folder.mkdir(parents=True)
        return []

    monkeypatch.setattr(reference, "run_reference", run_reference)
    (stored / "key").write_text("k1\n")
    (stored / "machine").write_text(reference.machine_fingerprint() + "\n")
    assert reference.reference_records(tmp_path, "00_setup") == {solution.name: [str(stored)]}
    assert runs == []

    (stored / "machine").write_text("x86_64 GenuineIntel AVX512, torch 2.11.0, numpy 2.5.2\n")
    first = reference.reference_records(tmp_path, "00_setup")
    assert len(runs) == 1, "the solution did not run on this machine"
    assert first[solution.name] != [str(stored)], "another machine's reference was used"
    assert reference.reference_records(tmp_path, "00_setup") == first
    assert len(runs) == 1, "the local run is not cached"

    (stored / "machine").unlink()  # a reference that does not say where it was made
    reference.reference_records(tmp_path, "00_setup")
    assert len(runs) == 1, "the same key and machine share the cached local run"

    (stored / "machine").write_text(reference.machine_fingerprint() + "\n")
    drawn = reference.reference_records(tmp_path, "00_setup", seed=77)
    assert len(runs) == 2, "a batch's own seed runs the solution with that seed, not the stored reference"
    assert runs[-1][1] == {"COURSE_GRADING_SEED": "77"}
    assert drawn[solution.name] != [str(stored)]
    reference.reference_records(tmp_path, "00_setup", seed=77)
    assert len(runs) == 2, "one run per seed"
