"""One submission through the grader, as a declared list of steps (`STEPS`) over one `Run`:

1. `check_integrity`: graded cells deleted or edited, answers that reach for the machinery;
2. `stage`: a read-only copy, with every answer that breaks the answer policy withheld;
3. `execute`: `nbgrader autograde` on that copy, its kernel in the sandbox, under a deadline;
4. `note_memory`: whether the whole process tree reached the sandbox's memory limit;
5. `judge`: the recorded checks replayed against the instructor's run (or, if the run gave no
   grades, why, and its partial grades removed);
6. `review_graded`: what the sandbox stopped, and the graded notebook sanitised for the browser.

`grade_job` is what a worker runs: it never raises on a submission."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader import gradebook, sandbox
from grader.course import Course
from grader.flags import contained_flags, failure_reason, processes_flag
from grader.intake import integrity_flags, make_writable, stage_submission
from grader.processes import run_autograde
from grader.replay import replay_verdicts
from grader.sanitize import sanitize_file as sanitize_notebook


@dataclass
class Job:
    """One submission to grade, as sent to a worker (a process of this machine or a Dask worker
    that sees the same course folder)."""
    root: Path
    lesson: str
    student: str
    reference: dict[str, list[dict]]
    protected: dict[str, dict[str, str | None]]
    deadline: float
    cell_timeout: float | None
    use_sandbox: bool
    enforce_policy: bool
    db: Path | None  # its own gradebook copy, or None: the course's (a serial batch)
    seed: int = 0  # the batch's seed for hidden inputs (course_lib.grading.hidden_seed)


@dataclass
class Run:
    """One submission on its way through `STEPS`: what each step reads and adds."""
    job: Job
    runtime: Path  # a fresh folder (sandbox.short_runtime_dir()): the kernel's only writable place
    status: str = "not run"
    seconds: float = 0.0
    log: str = ""  # nbgrader's
    processes_left: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)


def check_integrity(run: Run) -> None:
    job, course = run.job, Course(run.job.root)
    for notebook in sorted(course.submitted(job.student, job.lesson).glob("*.ipynb")):
        run.flags += integrity_flags(course.released(job.lesson) / notebook.name, notebook,
                                     course.solutions(job.lesson) / notebook.name)


def stage(run: Run) -> None:
    job = run.job
    run.flags += stage_submission(job.root, job.lesson, job.student, job.protected, job.enforce_policy)


def execute(run: Run) -> None:
    job = run.job
    run.status, run.seconds, run.log, run.processes_left = run_autograde(
        job.root, job.lesson, job.student, job.deadline, job.cell_timeout, job.use_sandbox, run.runtime, job.db, job.seed)


def note_memory(run: Run) -> None:
    if sandbox.memory_cgroup_hit(run.runtime):
        run.flags.append(f"its processes together reached the sandbox's memory limit "
                         f"({sandbox.limit('TREE_MEMORY_BYTES') / 2**30:g} GiB for the whole tree): review by hand")


def judge(run: Run) -> None:
    job = run.job
    if run.status == "graded":
        run.flags += replay_verdicts(job.root, job.lesson, job.student, job.reference, run.runtime, job.db)
        return
    gradebook.forget(job.root, job.lesson, job.student, job.db)
    run.flags.append(failure_reason(run.status, job.deadline, run.log))
    if run.processes_left:
        run.flags.append(processes_flag(run.processes_left, job.use_sandbox))
        run.processes_left = []  # said once


def review_graded(run: Run) -> None:
    job = run.job
    if run.status != "graded":
        return
    for notebook in sorted(Course(job.root).autograded(job.student, job.lesson).glob("*.ipynb")):
        run.flags += contained_flags(notebook, run.processes_left, job.use_sandbox)
        run.processes_left = []  # said once
        removed = sanitize_notebook(notebook)
        if removed:
            run.flags.append(f"its notebook held HTML or scripts that would run or fetch in the browser "
                             f"({'; '.join(removed[:4])}{'; ...' if len(removed) > 4 else ''}): removed from the "
                             "graded notebook (markdown that renders so is shown as plain text), and the pages "
                             "that show it sanitise what they render; review by hand")


STEPS = (check_integrity, stage, execute, note_memory, judge, review_graded)


def grade_submission(job: Job) -> tuple[str, float, list[str]]:
    """Run `STEPS` on one submission, then remove its staged copy and runtime folder.
    Returns (status, seconds, flags)."""
    run = Run(job, sandbox.short_runtime_dir())
    try:
        for step in STEPS:
            step(run)
    finally:
        for folder in (Course(job.root).staged(job.student, job.lesson), run.runtime):
            make_writable(folder)
            shutil.rmtree(folder, ignore_errors=True)
    return run.status, run.seconds, run.flags


def grade_job(job: Job) -> tuple[str, float, list[str]]:
    """Grade one submission, whatever happens: (status, seconds, flags). A failure of the grader
    itself on this submission (a bug, or hostile data) gives it 0 and a flag."""
    start = time.perf_counter()
    try:
        return grade_submission(job)
    except Exception as error:  # the grader's own failure on this submission: 0, flagged, go on
        flags = [f"the grader failed on this submission ({type(error).__name__}: {str(error)[:200]}); "
                 "scored 0, review by hand"]
        try:
            gradebook.forget(job.root, job.lesson, job.student, job.db)
        except Exception as forget_error:  # noqa: BLE001 (reported, and the batch goes on)
            flags.append(f"its partial grades could not be removed ({type(forget_error).__name__})")
        return "grader error", time.perf_counter() - start, flags
