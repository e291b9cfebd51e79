"""`python -m grader merge [COURSE_DIR ...] [--root DIR]`: the shard runs of a batch, merged
into this course's gradebook, report and graded notebooks.

`python -m grader autograde --shard I/N` grades a fixed 1/N of the submissions (every N-th
student id in sorted order) into COURSE_DIR/.grading/shards/I-of-N/ (its gradebook and report) and
COURSE_DIR/autograded/. Any batch system can run the N shards: in one course folder on a shared
filesystem, or in copies of it. This verb then merges every shard found under each COURSE_DIR
(default: the course itself) into --root (default: here), so that the gradebook, the report and
autograded/ are what one run over all submissions would have left.
"""

from __future__ import annotations

import argparse
import csv
import re
import shutil
import sys
from pathlib import Path

from grader import gradebook
from grader.autograde import setup_lock
from grader.course import Course
from grader.processes import nbgrader
from grader.report import CSV_HEADER, REPORT

SHARD_NAME = re.compile(r"^(\d+)-of-(\d+)$")


def shard_runs(course: Path) -> list[tuple[int, int, Path]]:
    runs = []
    for folder in sorted((course / gradebook.SHARDS).glob("*-of-*")):
        found = SHARD_NAME.match(folder.name)
        if found and (folder / REPORT).exists():
            runs.append((int(found[1]), int(found[2]), folder))
    return runs


def merge(root: Path, courses: list[Path]) -> tuple[list[dict], list[str]]:
    """Merge the shard runs under `courses` into `root`; returns (the merged report rows, warnings)."""
    root = root.resolve()
    merged: dict[tuple[str, str], dict] = {}
    warnings = []
    counts: dict[int, set[int]] = {}
    released: set[str] = set()  # lessons known to be in this course's gradebook
    for course in (c.resolve() for c in courses):
        runs = shard_runs(course)
        if not runs:
            warnings.append(f"{course}: no shard runs in {gradebook.SHARDS}/ (run `python -m grader autograde "
                            f"--shard I/N` there first)")
        for index, count, folder in runs:
            counts.setdefault(count, set()).add(index)
            with open(folder / REPORT, newline="") as f:
                rows = list(csv.DictReader(f))
            for row in rows:
                key = (row["lesson"], row["student"])
                if key in merged:
                    warnings.append(f"{key[1]}'s {key[0]} is in more than one shard run; the one in {folder} is kept")
                lesson, student = key
                if lesson not in released:
                    with setup_lock(root):
                        if not gradebook.has_lesson(root, lesson):
                            done = nbgrader(root, "generate_assignment", lesson, "--force")
                            if done.returncode != 0:
                                raise RuntimeError(f"nbgrader generate_assignment {lesson} failed:\n"
                                                   f"{done.stdout}{done.stderr}")
                    released.add(lesson)
                gradebook.merge_submission(folder / gradebook.MAIN, gradebook.main_db(root), lesson, student)
                graded, target = Course(course).autograded(student, lesson), Course(root).autograded(student, lesson)
                if course != root:
                    shutil.rmtree(target, ignore_errors=True)
                    if graded.exists():
                        shutil.copytree(graded, target)
                merged[key] = row
    for count, indices in counts.items():
        missing = sorted(set(range(1, count + 1)) - indices)
        if missing:
            warnings.append(f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} not found: their students are "
                            "not graded yet")
    report = Course(root).report
    rows = {}
    if report.exists():  # rows of earlier runs stay, unless a shard graded the same submission
        with open(report, newline="") as f:
            rows = {(r["lesson"], r["student"]): r for r in csv.DictReader(f)}
    rows.update(merged)
    graded_lessons = {lesson for lesson, _ in merged}
    for lesson in sorted(graded_lessons):  # a submission no shard graded (submitted/ changed between runs?)
        known = {s for (ls, s) in rows if ls == lesson}
        missed = sorted(f.parent.name for f in Course(root).submissions(lesson) if f.parent.name not in known)
        if missed:
            warnings.append(f"{lesson}: no shard graded {', '.join(missed[:10])}: not graded yet (run "
                            f"`python -m grader autograde {lesson} --resume` to grade the rest)")
    order = {lesson: i for i, lesson in enumerate(Course(root).lessons())}
    report.parent.mkdir(parents=True, exist_ok=True)
    with open(report, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_HEADER)
        writer.writeheader()
        writer.writerows(sorted(rows.values(), key=lambda r: (order.get(r["lesson"], len(order)), r["lesson"],
                                                              r["student"])))
    return list(merged.values()), warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("courses", nargs="*", type=Path, help="course folders holding shard runs (default: --root)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the course to merge into (default: here)")
    args = parser.parse_args(argv)
    rows, warnings = merge(args.root, args.courses or [args.root])
    for warning in warnings:
        print(f"WARNING: {warning}", file=sys.stderr)
    flagged = sum(1 for r in rows if r["flags"])
    print(f"merged {len(rows)} submission(s) ({flagged} flagged) into {args.root.resolve() / 'gradebook.db'} and "
          f"autograded/{REPORT}. Next: manual grading in the Formgrader (make formgrader), then make feedback.")
    return 1 if any(("not found" in w or "no shard runs" in w or "not graded yet" in w) for w in warnings) else 0


if __name__ == "__main__":
    sys.exit(main())
