"""Autograde every submission in submitted/, one at a time, and report what each one scored.

    python grader/autograde.py [LESSON ...] [--root DIR] [--deadline SECONDS]

Why not plain `nbgrader autograde`:
- its exit code says nothing about scores, so scores are read from the gradebook;
- a loop that catches BaseException survives nbgrader's interrupt, so every submission runs in
  its own process tree under a hard wall-clock deadline, and is killed (kernel included) when it
  overruns; it is then reported as "did not finish" with 0 points and the batch goes on;
- an edited test cell is silently restored and a deleted one silently scores 0, so submissions
  are compared with the released notebook first and every such change is reported;
- every kernel runs in a bubblewrap sandbox (grader/sandbox.py): no network, no course files
  but course_lib and the data, a non-root uid, resource limits; without bwrap grading refuses
  to run unless --no-sandbox is given;
- answers run in the same process as the hidden tests, so each answer cell is first checked
  against grader/answer_policy.py. Grading reads a read-only staged copy of each submission
  (submitted/ itself is never changed), in which an answer that breaks the policy is replaced
  by a `raise`: it scores 0 and is reported with every violation by name;
- the kernel's verdicts are not trusted: each check is recorded while it runs, replayed here
  against the instructor's run of the solution (grader/verdicts.py), and a cell that passed in
  the kernel but fails here scores 0 and is flagged;
- what the sandbox stopped (memory beyond its limit, refused files, output past the limit,
  processes left running) only shows as a 0, so it is read back from the graded notebook and
  the process tree and flagged too.

This module is the batch: release, reference, plan, hand each submission to an engine, merge its
grades, report. One submission's steps are grader/submission.py (`STEPS`), over grader/intake.py
(integrity, the staged copy), grader/processes.py (nbgrader under a deadline), grader/replay.py
(the recorded checks), grader/flags.py (what to review); grader/engines.py runs them here, in
processes or on Dask, and grader/report.py writes what a batch reports.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import secrets
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

from grader import gradebook, precheck, reference, sandbox
from grader.cells import lesson_names
from grader.course import Course
from grader.engines import completed, default_jobs, engine_pool, progress_bar, say, show_running
from grader.intake import protected_names
from grader.processes import nbgrader
from grader.report import (
    CSV_HEADER,
    REPORT,
    Result,
    append_row,
    forget_rows,
    format_row,
    reported,
    rewrite_in_order,
    summary,
)
from grader.submission import Job, grade_job

WATCHED = ("nbgrader_config.py", "course_lib", "solutions", "notebooks", "submitted")


def course_fingerprint(root: Path) -> dict[str, str]:
    """What each file grading relies on looks like; compared after each submission. The code,
    configuration and notebooks are hashed; submitted/, which grows with the class and is
    re-read after every submission, is compared by size and modification time."""
    import hashlib

    digests = {}
    for name in WATCHED:
        top = root / name
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file()) if top.exists() else []
        for path in files:
            if "__pycache__" in path.parts:
                continue
            if name == "submitted":
                stat = path.stat()
                digests[str(path.relative_to(root))] = f"{stat.st_size}:{stat.st_mtime_ns}"
            else:
                digests[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def plan_batch(root: Path, lessons: list[str], students: list[str] | None, already_reported: set,
               shard: tuple[int, int] | None, reference_cache: Path | None, use_sandbox: bool, seed: int):
    """Each lesson released and its reference ready: ({lesson: (reference records, protected names)},
    [(lesson, student, submission folder)] in serial order)."""
    course = Course(root)
    plans: list[tuple[str, str, Path]] = []
    setup = {}
    for lesson in lessons:
        released = course.released(lesson) / f"{lesson}.ipynb"
        with setup_lock(root):  # shards started at once in one course folder release it once
            if not released.exists() or not gradebook.has_lesson(root, lesson):
                done = nbgrader(root, "generate_assignment", lesson, "--force")
                if done.returncode != 0:
                    raise RuntimeError(f"nbgrader generate_assignment {lesson} failed:\n{done.stdout}{done.stderr}")
        protected = {nb.name: protected_names(nb) for nb in course.released_notebooks(lesson)}
        setup[lesson] = (reference.reference_records(root, lesson, cache=reference_cache, use_sandbox=use_sandbox,
                                                     seed=seed), protected)
        folders = course.submissions(lesson)
        mine = gradebook.shard_students([f.parent.name for f in folders], shard) if shard else None
        for student_dir in folders:
            student = student_dir.parent.name
            if (students is not None and student not in students) or (lesson, student) in already_reported:
                continue
            if mine is not None and student not in mine:
                continue
            plans.append((lesson, student, student_dir))
    return setup, plans


def autograde(
    root: Path,
    lessons: list[str],
    deadline: float = 600.0,
    cell_timeout: float | None = None,
    students: list[str] | None = None,
    use_sandbox: bool = True,
    report: Path | None = None,
    resume: bool = False,
    reference_cache: Path | None = None,
    enforce_policy: bool = True,
    jobs: int = 1,
    shard: tuple[int, int] | None = None,
    engine: str = "local",
    scheduler: str | None = None,
    progress: bool | None = None,
    seed: int = 0,
) -> list[Result]:
    """Grade every submission of `lessons`, `jobs` at a time (each in its own sandbox), on this
    machine's processes (engine "local") or a Dask cluster (engine "dask": `scheduler` is its
    address, or None for a LocalCluster of `jobs` workers). With `shard` (I, N) only the students
    of shard I of N are graded, into a gradebook and report of the shard's own
    (grader/gradebook.py) for `python -m grader merge`.

    Each row is appended to `report` (a CSV) as soon as it is known, so a batch that is stopped
    loses nothing; with `resume`, the submissions already in the report are skipped. Scores and
    flags are those of a serial run: a parallel batch grades each submission into its own copy
    of the gradebook and merges it back from this process, the only writer. The instructor's run
    of each solution, whose checks every submission's are replayed against, is cached in
    `reference_cache` (default <root>/.grading/reference). `seed` draws the hidden tests' inputs
    (`course_lib.grading.hidden_seed`; 0: the inputs the notebook states, whose reference is stored)."""
    if use_sandbox and sandbox.bwrap_path() is None:
        raise RuntimeError(NO_SANDBOX)
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1 (got {jobs})")
    # The pool opens first (its workers start while the batch is set up), and the pre-check runs
    # beside the release and the reference run; grading starts only after it passed.
    with engine_pool(engine, jobs, scheduler) as pool, ThreadPoolExecutor(1, thread_name_prefix="precheck") as side:
        checked = side.submit(precheck.check, root, use_sandbox)  # raises GradingSetupError: nothing is graded
        already_reported = reported(report) if (report is not None and resume) else set()
        batch_db = gradebook.main_db(root)
        try:
            setup, plans = plan_batch(root, lessons, students, already_reported, shard, reference_cache, use_sandbox, seed)
        except Exception:
            checked.result()  # a failed pre-check names the cause and its fix
            raise
        checked.result()
        if shard is not None:
            folder = gradebook.shard_folder(root, shard)
            folder.mkdir(parents=True, exist_ok=True)
            batch_db = folder / gradebook.MAIN
            if not (resume and batch_db.exists()):
                shutil.copyfile(gradebook.main_db(root), batch_db)
        parallel = jobs > 1 or engine != "local"
        fingerprint = course_fingerprint(root)  # after the release: grading itself changes no course file

        if report is not None and not report.exists():  # an empty shard still says it ran
            report.parent.mkdir(parents=True, exist_ok=True)
            with open(report, "w", newline="") as f:
                csv.writer(f).writerow(CSV_HEADER)
        results: list[Result] = []
        started = time.perf_counter()
        bar = progress_bar(len(plans), progress)
        running: dict[object, tuple[str, str, float, Path]] = {}  # future -> (lesson, student, start, its gradebook copy)

        def finish(lesson: str, student: str, status: str, seconds: float, flags: list[str], db: Path | None) -> None:
            nonlocal fingerprint
            if db is not None:  # the one writer copies the submission's grades back
                try:
                    gradebook.merge_submission(db, batch_db, lesson, student)
                except Exception as error:  # noqa: BLE001 (that submission is flagged; the batch goes on)
                    status, flags = "grader error", [*flags, f"its grades could not be merged into the gradebook "
                                                              f"({type(error).__name__}: {str(error)[:160]}); scored 0"]
                    gradebook.forget(root, lesson, student, batch_db)
                db.unlink(missing_ok=True)
            scores, maximum = gradebook.lesson_scores(root, lesson, batch_db)
            score = scores.get(student, 0.0)
            now = course_fingerprint(root)
            changed = changed_files(fingerprint, now)
            if changed:
                flags.append(f"COURSE FILES CHANGED while this submission was graded: {', '.join(changed[:5])}")
                print(f"WARNING: {lesson}/{student}: course files changed during grading: {changed[:5]}",
                      file=sys.stderr, flush=True)
                fingerprint = now
            for earlier in results:
                if earlier.lesson == lesson and scores.get(earlier.student, 0.0) != earlier.auto_score:
                    flags.append(f"the gradebook score of {earlier.student} changed while this one was graded")
            if flags:
                try:
                    gradebook.mark_flagged(batch_db, lesson, student)
                except Exception as error:  # noqa: BLE001 (the report still has the flags)
                    flags.append(f"it could not be marked flagged in the gradebook ({type(error).__name__})")
            results.append(Result(lesson, student, status, score, maximum, seconds, flags))
            say(bar, format_row(results[-1]))
            if report is not None:
                append_row(report, results[-1])
            if bar is not None:
                bar.update(1)

        def job(lesson: str, student: str) -> Job:
            records, protected = setup[lesson]
            db = gradebook.job_copy(batch_db, root, lesson, student) if parallel else (batch_db if shard else None)
            return Job(root, lesson, student, records, protected, deadline, cell_timeout, use_sandbox,
                       enforce_policy, db, seed)

        queue = list(plans)
        while queue or running:
            while queue and len(running) < (jobs if pool is not None else 1):
                lesson, student, student_dir = queue.pop(0)
                if not any(student_dir.glob("*.ipynb")):
                    expected = ", ".join(p.name for p in Course(root).released_notebooks(lesson))
                    finish(lesson, student, "no notebook", 0.0,
                           [f"submitted/{student}/{lesson}/ holds no notebook (expected {expected}); 0 points"], None)
                    continue
                task = job(lesson, student)
                if pool is None:  # serial: here, in this process
                    show_running(bar, {None: (lesson, student, time.perf_counter(), None)})
                    finish(lesson, student, *grade_job(task), None)  # it wrote the batch's gradebook itself
                    continue
                running[pool.submit(grade_job, task)] = (lesson, student, time.perf_counter(), task.db)
            if running:
                show_running(bar, running)
                for future in completed(running, timeout=1.0):
                    lesson, student, _, db = running.pop(future)
                    try:
                        status, seconds, flags = future.result()
                    except Exception as error:  # noqa: BLE001 (a worker lost: that submission only)
                        status, seconds, flags = "grader error", 0.0, [
                            f"its worker failed ({type(error).__name__}: {str(error)[:160]}); scored 0, review by hand"]
                        db.unlink(missing_ok=True)  # whatever it half-wrote is not merged, as a serial run forgets it
                        gradebook.forget(root, lesson, student, batch_db)
                    finish(lesson, student, status, seconds, flags, db if db.exists() else None)
    if bar is not None:
        bar.close()
    order = {(lesson, student): i for i, (lesson, student, _) in enumerate(plans)}
    results.sort(key=lambda r: order.get((r.lesson, r.student), -1))
    if report is not None and parallel:  # rows in the serial order, whatever order they finished in
        rewrite_in_order(report, lessons)
    summary(results, jobs if parallel else 1, time.perf_counter() - started)
    return results


@contextlib.contextmanager
def setup_lock(root: Path):
    grading = Course(root).grading
    grading.mkdir(exist_ok=True)
    with open(grading / "setup.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


NO_SANDBOX = (
    "bubblewrap (bwrap) is not installed or cannot create namespaces here, so the submissions' code "
    "would run unsandboxed as your user: it could read every file you can (solutions, other "
    "students' work, the gradebook), change them, use the network, and exhaust the machine. "
    "Install it (Debian/Ubuntu: apt install bubblewrap), or pass --no-sandbox if you accept that."
)


def release_is_current(root: Path, lesson: str) -> bool:
    """Whether notebooks/<lesson> is what `nbgrader generate_assignment` makes of solutions/ now.

    Autograde restores test cells from the last release, so grading after editing the
    solutions without `make release` would use the old tests.
    """
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        course, fresh_course = Course(root), Course(scratch)
        shutil.copy(course.config, scratch)
        shutil.copytree(course.solutions(lesson), fresh_course.solutions(lesson))
        if nbgrader(scratch, "generate_assignment", lesson, "--force").returncode != 0:
            return False
        for fresh in fresh_course.released_notebooks(lesson):
            current = course.released(lesson) / fresh.name
            if not current.exists() or nbformat.read(fresh, as_version=4) != nbformat.read(current, as_version=4):
                return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("lessons", nargs="*", help="assignments to grade (default: every folder in solutions/)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="course directory (holds nbgrader_config.py; default: here)")
    parser.add_argument("--deadline", type=float, default=600.0, help="hard wall-clock limit per submission, seconds")
    parser.add_argument("--cell-timeout", type=float, default=None, help="override nbgrader's per-cell timeout")
    parser.add_argument("--student", action="append", default=None, metavar="ID",
                        help="grade only this student (repeat for more); pass the batch's --seed to give them the "
                             "class's hidden inputs")
    parser.add_argument("--resume", action="store_true",
                        help="skip the submissions already in autograded/autograde-report.csv")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run the submissions' code unsandboxed (read the warning first)")
    parser.add_argument("--jobs", default="auto",
                        help="submissions graded at once, each in its own sandbox (default auto: one per core, "
                             "capped so that every sandbox could use its whole memory limit)")
    parser.add_argument("--shard", default=None, metavar="I/N",
                        help="grade only shard I of N (every N-th student id in sorted order) into "
                             ".grading/shards/I-of-N/; then `python -m grader merge`")
    parser.add_argument("--engine", choices=("local", "dask"), default="local",
                        help="local: this machine's processes; dask: a Dask cluster (needs .[scale])")
    parser.add_argument("--scheduler", default=None,
                        help="with --engine dask: the scheduler's address (default: a LocalCluster of --jobs workers)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the hidden tests' inputs (default: a new one per batch, printed; "
                             "0: the inputs the notebooks state)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="a progress bar with the ETA (default: on a terminal)")
    args = parser.parse_args(argv)
    args.root = args.root.resolve()
    if args.jobs != "auto" and not (args.jobs.isdigit() and int(args.jobs) >= 1):
        parser.error(f"--jobs takes a whole number of at least 1, or auto (got {args.jobs!r})")
    jobs = default_jobs() if args.jobs == "auto" else int(args.jobs)
    try:
        shard = gradebook.parse_shard(args.shard) if args.shard else None
    except ValueError as error:
        parser.error(str(error))
    lessons = args.lessons or lesson_names(args.root)
    if not (args.root / "submitted").is_dir():
        print(f"nothing to grade: put submissions in {args.root / 'submitted'}/<student>/<lesson>/<lesson>.ipynb")
        return 1
    with setup_lock(args.root):  # not while a shard started beside this one re-releases the lesson
        stale = [lesson for lesson in lessons
                 if Course(args.root).released(lesson).exists() and not release_is_current(args.root, lesson)]
    if stale:
        print(f"notebooks/ is out of date for {', '.join(stale)}: run `make release` (and send learners the new version) "
              f"before grading, or grading uses the old tests.")
        return 1
    seed = args.seed if args.seed is not None else 1 + secrets.randbelow(2**31 - 2)
    print(f"hidden inputs drawn from seed {seed} (--seed {seed} grades again with the same inputs)")
    print(f"{'lesson':<20} {'student':<24} {'status':<16} {'autograded':<13} {'time':>7}  notes")
    if not args.no_sandbox and sandbox.bwrap_path() is None:
        print(NO_SANDBOX)
        return 1
    if args.no_sandbox:
        print("WARNING: --no-sandbox: submissions run as your user, with your files and network.")
    report = gradebook.shard_folder(args.root, shard) / REPORT if shard else Course(args.root).report
    if not args.resume:  # the other lessons' rows stay: one report for the whole course
        forget_rows(report, lessons, args.student)
    try:
        results = autograde(args.root, lessons, args.deadline, args.cell_timeout, students=args.student,
                            use_sandbox=not args.no_sandbox,
                            report=report, resume=args.resume, jobs=jobs, shard=shard, engine=args.engine,
                            scheduler=args.scheduler, progress=args.progress, seed=seed)
    except precheck.GradingSetupError as error:
        print(f"NOT GRADED: {error}")
        return 1
    where = report.relative_to(args.root)
    if shard:
        print(f"\nshard {shard[0]} of {shard[1]}: {len(results)} submission(s); report in {where}. When every shard "
              f"is done: python -m grader merge COURSE_DIR...")
    else:
        print(f"\n{len(results)} submission(s); report in {where}. "
              f"Next: manual grading in the Formgrader (make formgrader), then make feedback.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
