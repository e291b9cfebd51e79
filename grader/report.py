"""What a batch reports: one `Result` per submission, a table line, and autograded/autograde-report.csv
(a row appended as soon as a submission is graded; grading a lesson again replaces only its rows)."""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Result:
    lesson: str
    student: str
    status: str  # "graded", "did not finish", "autograde error", "no notebook"
    auto_score: float
    auto_max: float
    seconds: float
    flags: list[str] = field(default_factory=list)


def format_row(r: Result) -> str:
    notes = "; ".join(r.flags) or "-"
    return f"{r.lesson:<20} {r.student:<24} {r.status:<16} {r.auto_score:>5.1f} / {r.auto_max:<5.1f} {r.seconds:>6.1f}s  {notes}"


REPORT = "autograde-report.csv"


CSV_HEADER = ["lesson", "student", "status", "autograded_score", "autograded_max", "seconds", "flags"]


def append_row(path: Path, r: Result) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(CSV_HEADER)
        writer.writerow([r.lesson, r.student, r.status, r.auto_score, r.auto_max, f"{r.seconds:.1f}", "; ".join(r.flags)])


def reported(path: Path) -> set[tuple[str, str]]:
    if not path.exists():
        return set()
    with open(path, newline="") as f:
        return {(row["lesson"], row["student"]) for row in csv.DictReader(f)}


def forget_rows(path: Path, lessons: list[str], students: list[str] | None = None) -> None:
    """Drop the rows of `lessons` (of `students` only, if given) from the report at `path`: they
    are about to be graded again."""
    if not path.exists():
        return
    with open(path, newline="") as f:
        rows = [row for row in csv.DictReader(f)
                if row["lesson"] not in lessons or (students is not None and row["student"] not in students)]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_HEADER)
        writer.writeheader()
        writer.writerows(rows)


def rewrite_in_order(report: Path, lessons: list[str]) -> None:
    with open(report, newline="") as f:
        rows = list(csv.DictReader(f))
    position = {lesson: i for i, lesson in enumerate(lessons)}
    rows.sort(key=lambda r: (position.get(r["lesson"], len(position)), r["lesson"], r["student"]))
    with open(report, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_HEADER)
        writer.writeheader()
        writer.writerows(rows)


def summary(results: list[Result], jobs: int, wall: float) -> None:
    if not results:
        return
    statuses = defaultdict(int)
    for r in results:
        statuses[r.status] += 1
    own = sum(r.seconds for r in results)
    flagged = sum(1 for r in results if r.flags)
    print(f"\n{len(results)} submission(s) in {wall:.0f} s with {jobs} at a time "
          f"({wall / len(results):.1f} s each; {own:.0f} s of grading in all): "
          + ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) + f"; {flagged} flagged", flush=True)
