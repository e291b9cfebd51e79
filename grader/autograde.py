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
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import psutil

from course_lib.grading import RECORD_ENV, SEED_ENV, WITHHOLD_ENV
from grader import gradebook, precheck, sandbox, verdicts
from grader.answer_policy import notebook_definitions, policy_violations, withhold
from grader.cells import is_answer_cell, is_test_cell, lesson_names, nbgrader_meta
from grader.nbgrader_plugins import GRADER_RUN_ENV
from grader.records import read_records
from grader.sanitize import sanitize_file as sanitize_notebook

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    lesson: str
    student: str
    status: str  # "graded", "did not finish", "autograde error", "no notebook"
    auto_score: float
    auto_max: float
    seconds: float
    flags: list[str] = field(default_factory=list)


def _nbgrader_cells(path: Path) -> dict[str, nbformat.NotebookNode]:
    nb = nbformat.read(path, as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells if "grade_id" in c.metadata.get("nbgrader", {})}


# Answers have no business touching the grading machinery; such a cell is flagged for review.
TAMPERING = re.compile(
    r"course_lib\.grading|\bforbid\b|\bassert_(?:tensor_close|shape|sequence_equal)\b|__code__|"
    r"TorchFunctionMode|TorchDispatchMode|DisableTorchFunction|_python_dispatch|sys\.modules|"
    r"__builtins__|\bbuiltins\b|__import__|importlib"
)


def integrity_flags(released: Path, submitted: Path, source: Path | None = None) -> list[str]:
    """Graded cells that a submission deleted or whose locked source it edited.

    A locked cell may match either the release or the instructor's source (which still holds
    the hidden tests, as when an instructor submits the solution to check the pipeline).
    """
    try:
        theirs = _nbgrader_cells(submitted)
    except Exception as error:  # an unreadable notebook is reported, not fatal to the batch
        return [f"unreadable notebook ({type(error).__name__}: {error})"]
    originals = _nbgrader_cells(source) if source is not None and source.exists() else {}
    deleted: dict[str, list[str]] = {"test": [], "answer": []}
    edited = []
    for grade_id, cell in _nbgrader_cells(released).items():
        meta = cell.metadata["nbgrader"]
        if grade_id not in theirs:
            deleted["test" if is_test_cell(cell) else "answer"].append(grade_id)
        elif meta.get("locked") and theirs[grade_id].source not in (cell.source, getattr(originals.get(grade_id), "source", None)):
            edited.append(grade_id)
    flags = [f"deleted {kind} cell(s) {', '.join(ids)} (they score 0; review by hand)" for kind, ids in deleted.items() if ids]
    tampering = [
        grade_id for grade_id, cell in theirs.items()
        if is_answer_cell(cell) and TAMPERING.search(cell.source)
    ]
    if tampering:
        flags.append(f"answer cell(s) {', '.join(tampering)} touch the grading machinery (review by hand)")
    if edited:
        flags.append(f"edited test cell(s) {', '.join(edited)} (restored from the release before grading)")
    return flags


STAGING = Path(".grading") / "staged"  # relative to the course root, like submitted/


def protected_names(released: Path) -> dict[str, str | None]:
    """The names the released notebook's own cells import or define, minus the answers' stubs."""
    nb = nbformat.read(released, as_version=4)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    stubs = notebook_definitions(c.source for c in code_cells if is_answer_cell(c))
    own = notebook_definitions(c.source for c in code_cells if not is_answer_cell(c))
    return {name: dotted for name, dotted in own.items() if name not in stubs}


def _make_writable(path: Path) -> None:
    for p in [path, *path.rglob("*")] if path.exists() else []:
        p.chmod(0o755 if p.is_dir() else 0o644)


def stage_submission(root: Path, lesson: str, student: str,
                     protected: dict[str, dict[str, str | None]] | None = None, enforce_policy: bool = True) -> list[str]:
    """Copy a submission into the staging area, withhold the cells the learner wrote or added
    that break the policy (answers, and cells without the release's nbgrader metadata), and
    make the copy read-only. Returns the flags to report. `protected` maps a notebook's name to
    its `protected_names` (computed here when not given). `enforce_policy=False` is for tests
    that prove the other layers hold by themselves."""
    source_dir = root / "submitted" / student / lesson
    staged_dir = root / STAGING / student / lesson
    _make_writable(staged_dir)
    shutil.rmtree(staged_dir, ignore_errors=True)
    shutil.copytree(source_dir, staged_dir, symlinks=False, ignore_dangling_symlinks=True)
    flags = []
    for notebook in sorted(staged_dir.glob("*.ipynb")):
        released = root / "notebooks" / lesson / notebook.name
        try:
            nb = nbformat.read(notebook, as_version=4)
        except Exception:  # reported by integrity_flags
            continue
        if protected is None or notebook.name not in protected:
            names = protected_names(released) if released.exists() else {}
        else:
            names = protected[notebook.name]
        changed = False
        released_cells = nbformat.read(released, as_version=4).cells if released.exists() else []
        released_ids = {nbgrader_meta(c).get("grade_id") for c in released_cells}
        released_sources = [c.source for c in released_cells if c.cell_type == "code" and not is_answer_cell(c)]
        seen, foreign = set(), []
        for index, cell in enumerate(nb.cells):  # nbgrader metadata the release does not have: an added cell
            grade_id = nbgrader_meta(cell).get("grade_id")
            if grade_id is not None and (grade_id not in released_ids or grade_id in seen):
                del cell.metadata["nbgrader"]
                foreign.append(f"cell {index} ({grade_id!r})")
                changed = True
            seen.add(grade_id)
        if foreign:
            flags.append(f"cell(s) carrying nbgrader metadata that the release does not have, graded as added cells: "
                         f"{', '.join(foreign[:5])}")
        findings = policy_violations(nb, names, released_sources) if enforce_policy else []
        if findings:
            withhold(nb, findings)
            changed = True
            withheld = [f"{label} ({'; '.join(str(v) for v in violations[:4])})" for _, label, violations in findings]
            flags.append(f"answer(s) withheld by the grading policy, scored 0, review by hand: {', '.join(withheld)}")
        if changed:
            nbformat.write(nb, notebook)
    for p in [*staged_dir.rglob("*"), staged_dir]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    return flags


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


def _changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def folder_bytes(folder: Path) -> int:
    """The bytes of the files under `folder` (links not followed; unreadable entries count 0)."""
    total = 0
    for directory, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                pass
    return total


def _kill_tree(process: subprocess.Popen) -> None:
    _kill_tree_pid(process.pid)


def _kill_tree_pid(pid: int) -> None:
    """Kill nbgrader and every descendant, including kernels started in their own sessions."""
    try:
        parent = psutil.Process(pid)
        family = parent.children(recursive=True) + [parent]
    except psutil.NoSuchProcess:
        return
    for p in family:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=10)


class ProcessWatch(threading.Thread):
    """Samples the process tree of one grading run, to see what the submission started.

    Only nbgrader starts processes directly below itself: its kernels or, with the sandbox,
    their launchers (bwrap, whose oldest child is bwrap again, the PID namespace's first
    process, whose oldest child is the kernel). A submission's code can start processes only
    below those, and only after its kernel exists, so position in the tree, not a name, tells
    them apart. Anything else was started by the submission: forked workers, a double-forked
    daemon (which the namespace's first process adopts). `left_running` holds those alive in
    the last sample in which a kernel was, that is, still running when the notebook finished;
    the sandbox kills them with the kernel, and the grader reports them. Short-lived helpers
    (matplotlib's `fc-list`, say) are gone by then. Without the sandbox a double-forked daemon
    leaves nbgrader's tree at once, so it is neither seen nor killed."""

    def __init__(self, pid: int, interval: float = 0.2, runtime: Path | None = None, runtime_bytes: int | None = None):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.runtime, self.runtime_bytes = runtime, runtime_bytes
        self.left_running: list[str] = []
        self.runtime_overflow = False  # the runtime folder grew past its bound: the tree was killed
        self._finished = threading.Event()

    def run(self) -> None:
        while not self._finished.wait(self.interval):
            try:
                root = psutil.Process(self.pid)
            except psutil.Error:
                return
            kernels, others = self.classify(root)
            if kernels:
                self.left_running = others
            if self.runtime is not None and self.runtime_bytes is not None and folder_bytes(self.runtime) > self.runtime_bytes:
                self.runtime_overflow = True
                _kill_tree_pid(self.pid)
                return

    @staticmethod
    def classify(root: psutil.Process) -> tuple[list[str], list[str]]:
        """(kernels, the submission's processes) below `root` (nbgrader), as "pid N: command"."""
        try:
            tree = root.children(recursive=True)
        except psutil.Error:
            return [], []
        info = {}
        for p in tree:
            try:
                with p.oneshot():
                    info[p.pid] = (p.ppid(), p.create_time(), p.name(), " ".join(p.cmdline()))
            except psutil.Error:  # gone, a zombie, or not ours to read
                continue
        children: dict[int, list[tuple[float, int]]] = defaultdict(list)
        for pid, (ppid, created, _, _) in info.items():
            children[ppid].append((created, pid))
        machinery, kernels = set(), []
        for _, pid in children[root.pid]:
            machinery.add(pid)
            while pid in info and info[pid][2] == "bwrap":  # a launcher: follow the oldest child
                pid = min(children[pid])[1] if children[pid] else None
                machinery.add(pid)
            if pid in info:
                kernels.append(pid)

        def describe(pid: int) -> str:
            command = info[pid][3]
            return f"pid {pid}: " + ("a fork of the kernel" if "ipykernel_launcher" in command
                                     else " ".join(command.split())[:80])

        return ([f"pid {pid}: the kernel" for pid in kernels],
                [describe(pid) for pid in info if pid not in machinery])

    def stop(self) -> None:
        self._finished.set()
        self.join()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env[GRADER_RUN_ENV] = "1"  # nbgrader's autograde refuses without it (nbgrader_plugins.RequireCourseGrader)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # nbgrader calls `alembic`
    return env


def nbgrader(root: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"],
        cwd=root, env=_env(), capture_output=True, text=True, timeout=timeout, check=False,
    )


def run_autograde(root: Path, lesson: str, student: str, deadline: float, cell_timeout: float | None,
                  use_sandbox: bool, runtime: Path, db: Path | None = None, seed: int = 0) -> tuple[str, float, str, list[str]]:
    """Run nbgrader autograde on one staged submission; the kernel records its checks in
    <runtime>/checks (`runtime` is a fresh folder from sandbox.short_runtime_dir()). Returns the
    status, the seconds, nbgrader's log and the processes the submission left running."""
    args = [sys.executable, "-m", "nbgrader", "autograde", lesson, "--student", student, "--force",
            f"--CourseDirectory.submitted_directory={STAGING}"]
    if cell_timeout is not None:
        args.append(f"--Execute.timeout={int(cell_timeout)}")
    if db is not None:  # this submission's own copy of the gradebook (grader/gradebook.py)
        args.append(f"--CourseDirectory.db_url={gradebook.url(db)}")
    env = _env()
    env[RECORD_ENV] = str(runtime / "checks")  # the checks' records (grader/verdicts.py)
    env[WITHHOLD_ENV] = "1"  # no expected value is computed in the submission's kernel
    env[SEED_ENV] = str(seed)  # the hidden inputs of this batch
    env[sandbox.GRADING_ENV] = "1"  # the sandbox sets it too; this is for --no-sandbox
    if use_sandbox:
        kernels = sandbox.write_kernel_spec(root / ".grading" / "jupyter", course=root)
        env["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(kernels), env.get("JUPYTER_PATH")) if p)
        env["TMPDIR"] = str(runtime)  # the connection file goes there, and only there is writable
        args += sandbox.nbgrader_options(runtime)
    start = time.perf_counter()
    # nbgrader's output goes to a file: a process the kernel left behind cannot hold a pipe open
    with tempfile.TemporaryFile(mode="w+") as log_file:
        process = subprocess.Popen(args, cwd=root, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        watch = ProcessWatch(process.pid, runtime=runtime, runtime_bytes=sandbox.limit("RUNTIME_BYTES"))
        watch.start()
        try:
            process.wait(timeout=deadline)
            status = "graded"
        except subprocess.TimeoutExpired:
            status = "did not finish"
        watch.stop()
        _kill_tree(process)  # the kernel too, and whatever it started
        log_file.seek(0)
        log = log_file.read()
    if watch.runtime_overflow:
        status = "wrote too much"
    elif status == "graded" and (process.returncode != 0 or "There was an error processing" in log):
        status = "autograde error"
    return status, time.perf_counter() - start, log, watch.left_running


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
OUTPUT_CUT = "[output cut by the grader"


def _flag_processes(processes: list[str], sandboxed: bool) -> str:
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
        flags.append(_flag_processes(processes_left, sandboxed))
    return flags


def unsafe_records(folder: Path, limit: int) -> str | None:
    """Why the records folder (written where the learner's code could write too) must not be
    read, or None: it must be a real folder of regular files (no FIFO, which would block the
    grader, no device, no link) of at most `limit` bytes in all."""
    if not os.path.lexists(folder):
        return None
    if folder.is_symlink() or not folder.is_dir():
        return "its records folder is not a folder"
    total = 0
    for entry in os.scandir(folder):
        info = entry.stat(follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode):
            return f"its records folder holds {entry.name!r}, which is not a regular file"
        total += info.st_size
    if total > limit:
        return f"its records hold {total:,} bytes, more than the {limit:,} allowed"
    return None


def learner_records(runtime: Path) -> list[dict] | str:
    """The checks a submission's kernel recorded in <runtime>/checks, or why they cannot be read."""
    try:
        problem = unsafe_records(runtime / "checks", sandbox.limit("RUNTIME_BYTES"))
        if problem is not None:
            return problem
        return read_records(runtime / "checks")
    except Exception as error:  # written where the learner's code could write too: anything goes
        return f"its check records are unreadable ({type(error).__name__}: {str(error)[:100]})"


def out_of_order(records: list[dict], cells: list[str]) -> list[str]:
    """The cells whose records are not what the recorder writes: it records the test cells in the
    notebook's order (`cells`, as the instructor's run made them), each cell's checks in one
    block numbered 0, 1, 2, ... A record for a cell the instructor's run has no checks in, or
    one that comes before an earlier cell's, was written by other code."""
    position = {cell: i for i, cell in enumerate(cells)}
    bad, seen, last, furthest, furthest_cell = [], set(), None, -1, None
    expected_index: dict[str, int] = {}
    for record in records:
        cell = str(record.get("cell"))
        culprit = furthest_cell if cell in position and position[cell] < furthest else cell
        wrong = (cell not in position or position[cell] < furthest or (cell != last and cell in seen)
                 or record.get("index") != expected_index.get(cell, 0))
        if wrong and culprit not in bad:
            bad.append(culprit)
        if position.get(cell, -1) > furthest:
            furthest, furthest_cell = position[cell], cell
        expected_index[cell] = expected_index.get(cell, 0) + 1
        seen.add(cell)
        last = cell
    return bad


def replay_verdicts(root: Path, lesson: str, student: str, reference: dict[str, list[dict]],
                    runtime: Path, db: Path | None = None) -> list[str]:
    """Replay the submission's recorded checks against the reference here, lower the cells that
    fail, and return the flags (grader/verdicts.py)."""
    records = learner_records(runtime)
    flags = []
    order = list(dict.fromkeys(r["cell"] for checks in reference.values() for r in checks))
    if not isinstance(records, str) and (forged := out_of_order(records, order)):
        flags.append(f"its check records are not what the recorder writes (checks out of order or repeated in "
                     f"{', '.join(forged[:3])}): written by the submission's code? Review by hand")
    if isinstance(records, str):  # every test cell fails the replay: say why once
        flags.append(f"{records}: every test cell scores 0; review by hand")
    else:
        orphans = [r["actual"] for r in records if r["cell"] is None]  # unreadable, and no cell to charge it to
        if orphans:
            flags.append(f"its check records begin with {len(orphans)} unreadable line(s) ({orphans[0]}); review by hand")
    for notebook, expected in reference.items():
        if isinstance(records, str):
            results = {cell: (records, []) for cell in {r["cell"] for r in expected}}
        else:
            results = verdicts.compare(expected, records)
        flags += verdicts.apply(root, lesson, student, notebook, results, db=db)
    return flags


def lesson_scores(root: Path, lesson: str, db: Path | None = None) -> tuple[dict[str, float], float]:
    """({student: autograded score}, autograded maximum) of a lesson, read from the gradebook
    (`db`, default the course's) in one session."""
    from nbgrader.api import Gradebook

    with Gradebook(gradebook.url(db or gradebook.main_db(root))) as gb:
        assignment = gb.find_assignment(lesson)
        auto_max = sum(gc.max_score for nb in assignment.notebooks for gc in nb.grade_cells if gc.cell_type == "code")
        scores = {
            submission.student.id: float(sum(g.score for nb in submission.notebooks for g in nb.grades
                                              if g.cell.cell_type == "code"))
            for submission in assignment.submissions
        }
    return scores, float(auto_max)


def gradebook_scores(root: Path, lesson: str, student: str) -> tuple[float, float]:
    """(autograded score, autograded maximum) of one submission, read from the gradebook."""
    scores, auto_max = lesson_scores(root, lesson)
    return scores.get(student, 0.0), auto_max


def _in_gradebook(root: Path, lesson: str) -> bool:
    return gradebook.has_assignment(gradebook.main_db(root), lesson)


def _forget(root: Path, lesson: str, student: str, db: Path | None = None) -> None:
    """Drop what a failed run left behind, so feedback and exports never show partial grades."""
    from nbgrader.api import Gradebook, MissingEntry

    shutil.rmtree(root / "autograded" / student / lesson, ignore_errors=True)
    with Gradebook(gradebook.url(db or gradebook.main_db(root))) as gb:
        try:
            gb.remove_submission(lesson, student)
        except MissingEntry:
            pass


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


def grade_job(job: Job) -> tuple[str, float, list[str]]:
    """Grade one submission, whatever happens: (status, seconds, flags). A failure of the grader
    itself on this submission (a bug, or hostile data) gives it 0 and a flag."""
    start = time.perf_counter()
    try:
        return grade_submission(job.root, job.lesson, job.student, job.reference, job.protected, job.deadline,
                                job.cell_timeout, job.use_sandbox, job.enforce_policy, db=job.db, seed=job.seed)
    except Exception as error:  # the grader's own failure on this submission: 0, flagged, go on
        flags = [f"the grader failed on this submission ({type(error).__name__}: {str(error)[:200]}); "
                 "scored 0, review by hand"]
        try:
            _forget(job.root, job.lesson, job.student, job.db)
        except Exception as forget_error:  # noqa: BLE001 (reported, and the batch goes on)
            flags.append(f"its partial grades could not be removed ({type(forget_error).__name__})")
        return "grader error", time.perf_counter() - start, flags


def default_jobs() -> int:
    """Submissions graded at once by default: one per core, but no more than the machine's memory
    holds if every sandbox used its whole memory limit (TREE_MEMORY_BYTES, 8 GiB), and at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    memory = psutil.virtual_memory().total // sandbox.limit("TREE_MEMORY_BYTES")
    return max(1, min(cores, memory))


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
    precheck.check(root, use_sandbox)  # raises GradingSetupError, and nothing is graded
    already_reported = _reported(report) if (report is not None and resume) else set()
    batch_db = gradebook.main_db(root)
    plans: list[tuple[str, str, Path]] = []  # (lesson, student, submission folder), in serial order
    setup = {}
    for lesson in lessons:
        released = root / "notebooks" / lesson / f"{lesson}.ipynb"
        with _setup_lock(root):  # shards started at once in one course folder release it once
            if not released.exists() or not _in_gradebook(root, lesson):
                done = nbgrader(root, "generate_assignment", lesson, "--force")
                if done.returncode != 0:
                    raise RuntimeError(f"nbgrader generate_assignment {lesson} failed:\n{done.stdout}{done.stderr}")
        protected = {nb.name: protected_names(nb) for nb in (root / "notebooks" / lesson).glob("*.ipynb")}
        reference = verdicts.reference_records(root, lesson, cache=reference_cache, use_sandbox=use_sandbox, seed=seed)
        setup[lesson] = (reference, protected)
        folders = sorted((root / "submitted").glob(f"*/{lesson}"))
        mine = gradebook.shard_students([f.parent.name for f in folders], shard) if shard else None
        for student_dir in folders:
            student = student_dir.parent.name
            if (students is not None and student not in students) or (lesson, student) in already_reported:
                continue
            if mine is not None and student not in mine:
                continue
            plans.append((lesson, student, student_dir))
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
    bar = _progress_bar(len(plans), progress)
    running: dict[object, tuple[str, str, float, Path]] = {}  # future -> (lesson, student, start, its gradebook copy)

    def finish(lesson: str, student: str, status: str, seconds: float, flags: list[str], db: Path | None) -> None:
        nonlocal fingerprint
        if db is not None:  # the one writer copies the submission's grades back
            try:
                gradebook.merge_submission(db, batch_db, lesson, student)
            except Exception as error:  # noqa: BLE001 (that submission is flagged; the batch goes on)
                status, flags = "grader error", [*flags, f"its grades could not be merged into the gradebook "
                                                          f"({type(error).__name__}: {str(error)[:160]}); scored 0"]
                _forget(root, lesson, student, batch_db)
            db.unlink(missing_ok=True)
        scores, maximum = lesson_scores(root, lesson, batch_db)
        score = scores.get(student, 0.0)
        now = course_fingerprint(root)
        changed = _changed(fingerprint, now)
        if changed:
            flags.append(f"COURSE FILES CHANGED while this submission was graded: {', '.join(changed[:5])}")
            print(f"WARNING: {lesson}/{student}: course files changed during grading: {changed[:5]}",
                  file=sys.stderr, flush=True)
            fingerprint = now
        for earlier in results:
            if earlier.lesson == lesson and scores.get(earlier.student, 0.0) != earlier.auto_score:
                flags.append(f"the gradebook score of {earlier.student} changed while this one was graded")
        results.append(Result(lesson, student, status, score, maximum, seconds, flags))
        _say(bar, format_row(results[-1]))
        if report is not None:
            _append_row(report, results[-1])
        if bar is not None:
            bar.update(1)

    def job(lesson: str, student: str) -> Job:
        reference, protected = setup[lesson]
        db = gradebook.job_copy(batch_db, root, lesson, student) if parallel else (batch_db if shard else None)
        return Job(root, lesson, student, reference, protected, deadline, cell_timeout, use_sandbox,
                   enforce_policy, db, seed)

    with _engine(engine, jobs, scheduler) as pool:
        queue = list(plans)
        while queue or running:
            while queue and len(running) < (jobs if pool is not None else 1):
                lesson, student, student_dir = queue.pop(0)
                if not any(student_dir.glob("*.ipynb")):
                    expected = ", ".join(p.name for p in (root / "notebooks" / lesson).glob("*.ipynb"))
                    finish(lesson, student, "no notebook", 0.0,
                           [f"submitted/{student}/{lesson}/ holds no notebook (expected {expected}); 0 points"], None)
                    continue
                task = job(lesson, student)
                if pool is None:  # serial: here, in this process
                    _show_running(bar, {None: (lesson, student, time.perf_counter(), None)})
                    finish(lesson, student, *grade_job(task), None)  # it wrote the batch's gradebook itself
                    continue
                running[pool.submit(grade_job, task)] = (lesson, student, time.perf_counter(), task.db)
            if running:
                _show_running(bar, running)
                for future in _completed(running, timeout=1.0):
                    lesson, student, _, db = running.pop(future)
                    try:
                        status, seconds, flags = future.result()
                    except Exception as error:  # noqa: BLE001 (a worker lost: that submission only)
                        status, seconds, flags = "grader error", 0.0, [
                            f"its worker failed ({type(error).__name__}: {str(error)[:160]}); scored 0, review by hand"]
                        db.unlink(missing_ok=True)  # whatever it half-wrote is not merged, as a serial run forgets it
                        _forget(root, lesson, student, batch_db)
                    finish(lesson, student, status, seconds, flags, db if db.exists() else None)
    if bar is not None:
        bar.close()
    order = {(lesson, student): i for i, (lesson, student, _) in enumerate(plans)}
    results.sort(key=lambda r: order.get((r.lesson, r.student), -1))
    if report is not None and parallel:  # rows in the serial order, whatever order they finished in
        _rewrite_in_order(report, lessons)
    _summary(results, jobs if parallel else 1, time.perf_counter() - started)
    return results


@contextlib.contextmanager
def _setup_lock(root: Path):
    (root / ".grading").mkdir(exist_ok=True)
    with open(root / ".grading" / "setup.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def _engine(engine: str, jobs: int, scheduler: str | None):
    """None (grade here, one at a time), or an executor whose submit(fn, arg) returns a future:
    this machine's processes, or a Dask cluster."""
    if engine == "local":
        if jobs == 1:
            yield None
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawn: the workers start clean, not as copies of a process that may hold threads
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            yield pool
        return
    if engine != "dask":
        raise ValueError(f"unknown engine {engine!r}: use local or dask")
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise RuntimeError("--engine dask needs Dask's distributed scheduler: pip install -e '.[scale]'") from None
    if scheduler:  # a running cluster (dask-jobqueue, dask-kubernetes, `dask scheduler`): it must see this folder
        with Client(scheduler) as client:
            yield client
        return
    with LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, memory_limit=0,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


def _completed(running: dict, timeout: float) -> list:
    """The futures of `running` that are done, waiting up to `timeout` seconds for one (for any
    executor's futures: concurrent.futures' and Dask's)."""
    end = time.monotonic() + timeout
    while True:
        done = [future for future in running if future.done()]
        if done or time.monotonic() >= end:
            return done
        time.sleep(0.1)


def _progress_bar(total: int, progress: bool | None):
    """tqdm's bar (done/total, seconds per submission, ETA) on stderr; by default only on a
    terminal."""
    if progress is False or (progress is None and not sys.stderr.isatty()) or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="submission", desc="grading", file=sys.stderr, dynamic_ncols=True)


def _show_running(bar, running: dict) -> None:
    """The submissions being graded now, with their seconds so far: one that stalls shows."""
    if bar is None:
        return
    now = time.perf_counter()
    names = [f"{student} {now - start:.0f}s" for _, student, start, _ in running.values()]
    bar.set_postfix_str("now: " + ", ".join(names)[:120], refresh=True)


def _say(bar, line: str) -> None:
    if bar is None:
        print(line, flush=True)
    else:
        bar.write(line)


def _rewrite_in_order(report: Path, lessons: list[str]) -> None:
    with open(report, newline="") as f:
        rows = list(csv.DictReader(f))
    position = {lesson: i for i, lesson in enumerate(lessons)}
    rows.sort(key=lambda r: (position.get(r["lesson"], len(position)), r["lesson"], r["student"]))
    with open(report, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_HEADER)
        writer.writeheader()
        writer.writerows(rows)


def _summary(results: list[Result], jobs: int, wall: float) -> None:
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


def grade_submission(root: Path, lesson: str, student: str, reference: dict[str, list[dict]],
                     protected: dict[str, dict[str, str | None]], deadline: float, cell_timeout: float | None,
                     use_sandbox: bool, enforce_policy: bool = True, db: Path | None = None,
                     seed: int = 0) -> tuple[str, float, list[str]]:
    """Grade one submission: integrity checks, the answer policy, nbgrader in the sandbox, the
    replay of its checks, and what the sandbox stopped. Returns (status, seconds, flags)."""
    student_dir = root / "submitted" / student / lesson
    flags = []
    for notebook in sorted(student_dir.glob("*.ipynb")):
        flags += integrity_flags(
            root / "notebooks" / lesson / notebook.name, notebook, root / "solutions" / lesson / notebook.name
        )
    runtime = sandbox.short_runtime_dir()
    try:
        flags += stage_submission(root, lesson, student, protected, enforce_policy)
        status, seconds, log, processes_left = run_autograde(root, lesson, student, deadline, cell_timeout,
                                                             use_sandbox, runtime, db, seed)
        memory_hit = sandbox.memory_cgroup_hit(runtime)
        if memory_hit:
            flags.append(f"its processes together reached the sandbox's memory limit "
                         f"({sandbox.limit('TREE_MEMORY_BYTES') / 2**30:g} GiB for the whole tree): review by hand")
        if status != "graded":
            _forget(root, lesson, student, db)
            flags.append(_failure_reason(status, deadline, log))
            if processes_left:
                flags.append(_flag_processes(processes_left, use_sandbox))
        else:
            flags += replay_verdicts(root, lesson, student, reference, runtime, db)
            for notebook in sorted((root / "autograded" / student / lesson).glob("*.ipynb")):
                flags += contained_flags(notebook, processes_left, use_sandbox)
                processes_left = []  # said once
                removed = sanitize_notebook(notebook)
                if removed:
                    flags.append(f"its notebook held HTML or scripts that would run or fetch in the browser "
                                 f"({'; '.join(removed[:4])}{'; ...' if len(removed) > 4 else ''}): removed from the "
                                 "graded notebook (markdown that renders so is shown as plain text), and the pages "
                                 "that show it sanitise what they render; review by hand")
    finally:
        staged = root / STAGING / student / lesson
        _make_writable(staged)
        shutil.rmtree(staged, ignore_errors=True)
        _make_writable(runtime)
        shutil.rmtree(runtime, ignore_errors=True)
    return status, seconds, flags


NO_SANDBOX = (
    "bubblewrap (bwrap) is not installed or cannot create namespaces here, so the submissions' code "
    "would run unsandboxed as your user: it could read every file you can (solutions, other "
    "students' work, the gradebook), change them, use the network, and exhaust the machine. "
    "Install it (Debian/Ubuntu: apt install bubblewrap), or pass --no-sandbox if you accept that."
)


def _failure_reason(status: str, deadline: float, log: str) -> str:
    if status == "did not finish":
        return f"killed after {deadline:.0f} s: a cell never finished (0 points; check by hand)"
    if status == "wrote too much":
        return (f"killed: it wrote more than {sandbox.limit('RUNTIME_BYTES') / 2**20:g} MiB into its runtime folder "
                "on the grader's disk (0 points; check by hand)")
    launcher = _launcher_error(log)
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


def _launcher_error(log: str) -> str | None:
    """What the sandbox's launcher or the interpreter printed when a kernel could not start (a
    path the sandbox does not bind, a missing module), rather than 'the kernel died'."""
    found = LAUNCHER_ERRORS.findall(log)
    return found[-1].strip()[:200] if found else None


def format_row(r: Result) -> str:
    notes = "; ".join(r.flags) or "-"
    return f"{r.lesson:<20} {r.student:<24} {r.status:<16} {r.auto_score:>5.1f} / {r.auto_max:<5.1f} {r.seconds:>6.1f}s  {notes}"


REPORT = "autograde-report.csv"
CSV_HEADER = ["lesson", "student", "status", "autograded_score", "autograded_max", "seconds", "flags"]


def _append_row(path: Path, r: Result) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(CSV_HEADER)
        writer.writerow([r.lesson, r.student, r.status, r.auto_score, r.auto_max, f"{r.seconds:.1f}", "; ".join(r.flags)])


def _reported(path: Path) -> set[tuple[str, str]]:
    if not path.exists():
        return set()
    with open(path, newline="") as f:
        return {(row["lesson"], row["student"]) for row in csv.DictReader(f)}


def forget_rows(path: Path, lessons: list[str]) -> None:
    """Drop the rows of `lessons` from the report at `path` (they are about to be graded again)."""
    if not path.exists():
        return
    with open(path, newline="") as f:
        rows = [row for row in csv.DictReader(f) if row["lesson"] not in lessons]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_HEADER)
        writer.writeheader()
        writer.writerows(rows)


def write_csv(results: list[Result], path: Path) -> None:
    path.unlink(missing_ok=True)
    for r in results:
        _append_row(path, r)


def release_is_current(root: Path, lesson: str) -> bool:
    """Whether notebooks/<lesson> is what `nbgrader generate_assignment` makes of solutions/ now.

    Autograde restores test cells from the last release, so grading after editing the
    solutions without `make release` would use the old tests.
    """
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        shutil.copy(root / "nbgrader_config.py", scratch)
        shutil.copytree(root / "solutions" / lesson, scratch / "solutions" / lesson)
        if nbgrader(scratch, "generate_assignment", lesson, "--force").returncode != 0:
            return False
        for fresh in (scratch / "notebooks" / lesson).glob("*.ipynb"):
            current = root / "notebooks" / lesson / fresh.name
            if not current.exists() or nbformat.read(fresh, as_version=4) != nbformat.read(current, as_version=4):
                return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("lessons", nargs="*", help="assignments to grade (default: every folder in solutions/)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="course directory (holds nbgrader_config.py; default: here)")
    parser.add_argument("--deadline", type=float, default=600.0, help="hard wall-clock limit per submission, seconds")
    parser.add_argument("--cell-timeout", type=float, default=None, help="override nbgrader's per-cell timeout")
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
    stale = [lesson for lesson in lessons if (args.root / "notebooks" / lesson).exists() and not release_is_current(args.root, lesson)]
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
    report = (gradebook.shard_folder(args.root, shard) if shard else args.root / "autograded") / REPORT
    if not args.resume:  # the other lessons' rows stay: one report for the whole course
        forget_rows(report, lessons)
    try:
        results = autograde(args.root, lessons, args.deadline, args.cell_timeout, use_sandbox=not args.no_sandbox,
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
