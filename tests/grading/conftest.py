"""Prints the grading round trip table (submission, expected, got) at the end of the run."""

from __future__ import annotations

from pathlib import Path

TABLE_DIR = Path(__file__).resolve().parents[2] / "build" / "round_trip"


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # controller (or a run without xdist)
        for old in TABLE_DIR.glob("*.tsv"):
            old.unlink()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rows = [line.split("\t") for f in sorted(TABLE_DIR.glob("*.tsv")) for line in f.read_text().splitlines()]
    if not rows:
        return
    tr = terminalreporter
    tr.section("grading round trip (autograded points, read from the gradebook)")
    tr.write_line(f"{'lesson':<20} {'submission':<28} {'expected':>8} {'got':>6}  {'match':<5} {'status':<15} {'time':>6}  notes")
    for lesson, student, expected, got, status, seconds, notes in rows:
        match = "yes" if float(expected) == float(got) else "NO"
        tr.write_line(f"{lesson:<20} {student:<28} {expected:>8} {got:>6}  {match:<5} {status:<15} {seconds:>5}s  {notes}")
