"""Root pytest configuration (applies to nbval runs on solutions/ as well as to tests/).

The round-trip table hooks live here because, under pytest-xdist, only the controller prints
the summary and it never loads conftest files below the command-line paths.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.notebooks.budget import NotebookBudget

# Maintainers and CI keep the corpus in ../shared/data (no downloads in tests). Kernels that
# nbval and nbgrader start inherit this variable.
SHARED_DATA = Path(__file__).resolve().parent.parent / "shared" / "data"
if "COURSE_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["COURSE_DATA_DIR"] = str(SHARED_DATA)
if os.environ.get("COURSE_DATA_DIR"):  # kernels start in the notebook's folder: make it absolute
    os.environ["COURSE_DATA_DIR"] = str(Path(os.environ["COURSE_DATA_DIR"]).resolve())

# Lesson 11's Triton kernel runs in Triton's interpreter where there is no GPU, and the
# interpreter must be on before anything imports triton (transformers does, for one): a process
# that imported triton first cannot interpret kernels afterwards.
if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

NOTEBOOK_BUDGET = NotebookBudget()
ROUND_TRIP_TABLES = Path(__file__).resolve().parent / "build" / "round_trip"  # written by tests/grading


def pytest_configure(config):
    # Notebooks shorten what nbval compares none of (lesson 10's live trainings) under COURSE_NBVAL.
    if config.getoption("nbval", False) or config.getoption("nbval_lax", False):
        from course_lib.grading_env import NBVAL_ENV

        os.environ[NBVAL_ENV] = "1"
    # Each notebook's nbval run keeps to its time budget, charged where the notebook runs: in an
    # xdist worker, or in a run without xdist (xdist's controller only relays the reports).
    NOTEBOOK_BUDGET.active = hasattr(config, "workerinput") or not config.getoption("numprocesses", None)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    NOTEBOOK_BUDGET.charge(report)


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # controller (or a run without xdist)
        for old in ROUND_TRIP_TABLES.glob("*.tsv"):
            old.unlink()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rows = [line.split("\t") for f in sorted(ROUND_TRIP_TABLES.glob("*.tsv")) for line in f.read_text().splitlines()]
    if not rows:
        return
    tr = terminalreporter
    tr.section("grading round trip (autograded points, read from the gradebook)")
    tr.write_line(f"{'lesson':<20} {'submission':<28} {'expected':>8} {'got':>6}  {'match':<5} {'status':<15} {'time':>6}  notes")
    for lesson, student, expected, got, status, seconds, notes in rows:
        if expected.startswith("<"):  # wrong answers: below full marks (checked per exercise by the test)
            match = "yes" if float(got) < float(expected[1:]) else "NO"
        else:
            match = "yes" if float(expected) == float(got) else "NO"
        tr.write_line(f"{lesson:<20} {student:<28} {expected:>8} {got:>6}  {match:<5} {status:<15} {seconds:>5}s  {notes}")
