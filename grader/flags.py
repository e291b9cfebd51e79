"""What the instructor is told to review about one run: what the sandbox stopped (memory, files,
limits, the network, output cut, processes left running) and why a run gave no grades; and
`python -m grader flags [LESSON ...]`, the flagged submissions of the report, with why."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from course_lib.grading_env import OUTPUT_CUT
from grader import sandbox

# What the sandbox stopped leaves errors in the graded notebook: what matches, and what the
# instructor is told ({memory} is the memory limit, or that there was no sandbox).
STOPPED_BY_THE_SANDBOX = (
    (re.compile(r"^MemoryError:|allocate memory"), "ran out of memory ({memory})"),
    (re.compile(r"^PermissionError:|Read-only file system|No such file or directory: '/"),
     "reached for a file or a permission the sandbox does not give"),
    (re.compile(r"File too large|requested and \d+ written|Resource temporarily unavailable|Too many open files"),
     "hit the sandbox's limit on processes, file size or open files"),
    (re.compile(r"No space left on device"), "filled its private /tmp (the sandbox allows {tmp})"),
    (re.compile(r"Network is unreachable|name resolution|Name or service not known"),
     "tried to use the network, which the sandbox does not have,"),
)




def processes_flag(processes: list[str], sandboxed: bool) -> str:
    killer = "the sandbox" if sandboxed else "the grader"
    return (f"left {len(processes)} process(es) running when its notebook finished, which {killer} killed "
            f"({'; '.join(processes[:2])}): review by hand")


def contained_flags(notebook: Path, processes_left: list[str], sandboxed: bool = True) -> list[str]:
    """What the sandbox stopped in one graded notebook, for the instructor to review: memory
    beyond its limit, files it does not provide or lets no one write, its limits on processes,
    file size and open files, the network it does not have, output past the grader's limit, and
    processes still running when the notebook finished. None of these happen in an honest
    answer run as the course intends; a relative path that does not exist (a typo) is not
    flagged. An attack that catches its own error leaves no trace in the notebook; it still
    scores what its checks earn."""
    try:
        nb = nbformat.read(notebook, as_version=4)
    except Exception:  # an unreadable graded notebook shows in its gradebook entry
        return []
    found: dict[str, list[str]] = {reason: [] for _, reason in STOPPED_BY_THE_SANDBOX}
    cut = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        name = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index}"
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                error = f"{output.get('ename', '')}: {output.get('evalue', '')}"
                reason = next((reason for pattern, reason in STOPPED_BY_THE_SANDBOX if pattern.search(error)), None)
                if reason is not None:
                    found[reason].append(f"{name} ({error[:100]})")
                continue
            shown = output.get("text", "") if output.output_type == "stream" else \
                "\n".join(v for v in output.get("data", {}).values() if isinstance(v, str))
            if OUTPUT_CUT in shown:
                cut.append(name)
    memory = f"the sandbox allows {sandbox.limit('MEMORY_BYTES') / 2**30:g} GiB" if sandboxed else "graded without the sandbox"
    tmp = f"{sandbox.limit('TMP_BYTES') / 2**30:g} GiB"
    flags = [f"{reason.format(memory=memory, tmp=tmp)} in {'; '.join(cells[:3])}: review by hand"
             for reason, cells in found.items() if cells]
    if cut:
        flags.append(f"printed more than {sandbox.limit('OUTPUT_CHARS'):,} characters, and the grader cut its "
                     f"output in {', '.join(dict.fromkeys(cut))}: review by hand")
    if processes_left:
        flags.append(processes_flag(processes_left, sandboxed))
    return flags


def failure_reason(status: str, deadline: float, log: str) -> str:
    if status == "did not finish":
        return f"killed after {deadline:.0f} s: a cell never finished (0 points; check by hand)"
    if status == "wrote too much":
        return (f"killed: it wrote more than {sandbox.limit('RUNTIME_BYTES') / 2**20:g} MiB into its runtime folder "
                "on the grader's disk (0 points; check by hand)")
    launcher = launcher_error(log)
    if launcher:
        return f"the kernel could not start or died at once: {launcher} (0 points; a grading setup problem?)"
    if "Timeout waiting for IOPub" in log:
        return "the kernel stopped sending output (IOPub timeout; 0 points; check by hand)"
    if "CellTimeoutError" in log:
        return "a cell ran past the per-cell timeout (0 points; check by hand)"
    if "DeadKernelError" in log or "Kernel died" in log:
        return "the kernel died (out of memory, or killed; 0 points; check by hand)"
    errors = [line.strip() for line in log.splitlines() if "Error" in line and "Please see the" not in line]
    return "nbgrader could not grade it: " + (errors[-1][:160] if errors else "see nbgrader's log")


LAUNCHER_ERRORS = re.compile(r"^(bwrap: .*|.*No module named .*|.*execv.*|.*can't open file.*|setpriv: .*)$", re.M)


def launcher_error(log: str) -> str | None:
    """What the sandbox's launcher or the interpreter printed when a kernel could not start (a
    path the sandbox does not bind, a missing module), rather than 'the kernel died'."""
    found = LAUNCHER_ERRORS.findall(log)
    return found[-1].strip()[:200] if found else None


def main(argv: list[str] | None = None) -> int:
    import argparse
    import csv

    from grader.course import Course

    parser = argparse.ArgumentParser(description="The submissions the grader flagged for review, with its reasons "
                                                 "(from autograded/autograde-report.csv).")
    parser.add_argument("lessons", nargs="*", help="only these lessons (default: all)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="course directory (default: here)")
    args = parser.parse_args(argv)
    report = Course(args.root).report
    if not report.exists():
        print(f"no report at {report}: grade first (make autograde)")
        return 1
    with open(report, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["flags"] and (not args.lessons or r["lesson"] in args.lessons)]
    for r in rows:
        print(f"{r['lesson']:<20} {r['student']:<24} {r['status']:<16} "
              f"{float(r['autograded_score']):g} / {float(r['autograded_max']):g}\n    {r['flags']}")
    print(f"{len(rows)} flagged submission(s); they are marked flagged in the Formgrader (make formgrader).")
    return 0
