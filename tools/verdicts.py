"""Hidden-test verdicts decided in the grader's process, not in the learner's.

An answer runs in the same Python process as the tests that judge it, so whatever that process
reports (nbgrader reads pass or fail from the kernel) is only as good as the answer's manners.
The answer policy (tools/answer_policy.py) and the sandbox (tools/sandbox.py) narrow what an
answer can do; this module takes the verdict itself out of its reach:

1. While grading, every check a test cell makes through `course_lib.grading`'s helpers is
   recorded before it is evaluated: the learner's value, the expected value and the check's
   options (safetensors for tensors, tagged JSON for the rest; nothing is unpickled).
   `nbgrader_config.py` announces each graded test cell to the kernel (`begin_checks`).
2. The instructor's solution is run the same way: `make execute-solutions` stores its records
   in reference-checks/<lesson>/ with a key (the hash of the solution's code and of
   `course_lib`); when the key is stale, grading runs the solution once itself and caches the
   result (`reference_records`). Its records are the trusted expected values, options and
   number of checks per cell.
3. `compare` replays, in this process, each of the learner's recorded values against the
   reference's expected value with the same helper, so a failure carries the same message as
   in the notebook. A cell passes only if it made as many checks as the reference, of the same
   kinds, and each passed.
4. `apply` lowers to 0 the gradebook score of every cell that the kernel reported as passed
   but that fails here, and flags it. It never raises a score.

When the learner's expected value itself differs from the reference's (the test's inputs
differed: the learner's code consumed the global random state differently, or tampered with
the reference), the check is judged against the learner's expected value and flagged for
review, so that no honest answer loses points to a random-state difference.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

import nbformat

if __package__ in (None, ""):  # run as a script: make `tools` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_lib.grading import (  # noqa: E402
    RECORD_ENV,
    announcement,
    consolidate_records,
    read_records,
    replay_check,
)
from tools import sandbox  # noqa: E402
from tools.nbtools import is_test_cell, nbgrader_meta  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


STORED = "reference-checks"  # <root>/reference-checks/<lesson>/<notebook>/: the solution's records


def announcing_client(nb, **kwargs):
    """An nbclient NotebookClient that announces each graded test cell to the kernel before it
    runs it (as nbgrader_config.py's ExecuteAnnouncingTestCells does while grading), outside the
    notebook and its execution counts."""
    from nbclient import NotebookClient

    class AnnouncingClient(NotebookClient):
        async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
            if is_test_cell(cell):  # silent: no output, no execution count
                msg_id = self.kc.execute(announcement(nbgrader_meta(cell)["grade_id"]), silent=True,
                                         store_history=False)
                reply = await self.async_wait_for_reply(msg_id)
                if reply is None or reply["content"]["status"] != "ok":
                    raise RuntimeError(f"announcing a test cell to the kernel failed: {reply}")
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)

    return AnnouncingClient(nb, **kwargs)


def course_lib_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted((ROOT / "course_lib").rglob("*.py")):
        digest.update(path.relative_to(ROOT).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()


def reference_key(solution: Path) -> str:
    """What the reference records depend on: every code cell of the solution (not its outputs)
    and course_lib."""
    nb = nbformat.read(solution, as_version=4)
    digest = hashlib.sha256(course_lib_digest().encode())
    for cell in nb.cells:
        if cell.cell_type == "code":
            digest.update(cell.source.encode() + b"\0")
    return digest.hexdigest()[:16]


def stored_reference(root: Path, lesson: str, notebook: str) -> Path:
    return root / STORED / lesson / Path(notebook).stem


def store_reference(records: Path, root: Path, lesson: str, solution: Path) -> int:
    """Keep the records of an execution of `solution` as its stored reference; returns the count."""
    folder = stored_reference(root, lesson, solution.name)
    shutil.rmtree(folder, ignore_errors=True)
    count = consolidate_records(records, folder)
    (folder / "key").write_text(reference_key(solution) + "\n")
    return count


def run_reference(solution: Path, folder: Path, use_sandbox: bool = True, timeout: int = 600) -> list[str]:
    """Execute the solution notebook with recording on; the records land in folder/checks.
    Returns the errors raised by graded test cells (there should be none)."""
    runtime = sandbox.short_runtime_dir()
    record = runtime / "checks"
    spec_folder = runtime.parent / f"{runtime.name}-jupyter"  # outside the one folder the kernel may write
    nb = nbformat.read(solution, as_version=4)
    saved = {k: os.environ.get(k) for k in (RECORD_ENV, "JUPYTER_PATH", sandbox.GRADING_ENV)}
    os.environ[RECORD_ENV] = str(record)
    os.environ[sandbox.GRADING_ENV] = "1"  # run as a submission is graded (tools/sandbox.py)
    try:
        if use_sandbox:
            kernels = sandbox.write_kernel_spec(spec_folder)
            os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(kernels), saved["JUPYTER_PATH"]) if p)
            client = announcing_client(nb, timeout=timeout, kernel_name=sandbox.KERNEL_NAME, allow_errors=True,
                                       resources={"metadata": {"path": str(runtime)}})
            client.km = sandbox.connect_through(client.create_kernel_manager(), runtime)
        else:
            client = announcing_client(nb, timeout=timeout, allow_errors=True,
                                       kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"),
                                       resources={"metadata": {"path": str(solution.parent)}})
        client.execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    shutil.rmtree(folder / "checks", ignore_errors=True)
    if record.exists():
        shutil.copytree(record, folder / "checks")
    shutil.rmtree(runtime, ignore_errors=True)
    shutil.rmtree(spec_folder, ignore_errors=True)
    return [f"{nbgrader_meta(c)['grade_id']}: {o.ename}: {o.evalue[:200]}"
            for c in nb.cells if is_test_cell(c) for o in c.get("outputs", []) if o.output_type == "error"]


def reference_records(root: Path, lesson: str, cache: Path | None = None, use_sandbox: bool = True) -> dict:
    """{notebook name: records of the instructor's solution}. The stored reference
    (reference-checks/, written by `make execute-solutions`) is used when its key matches the
    solution and course_lib; otherwise the solution is run once here and cached in `cache`
    (default <root>/.grading/reference)."""
    cache = cache or root / ".grading" / "reference"
    result = {}
    for solution in sorted((root / "solutions" / lesson).glob("*.ipynb")):
        key = reference_key(solution)
        stored = stored_reference(root, lesson, solution.name)
        if (stored / "key").exists() and (stored / "key").read_text().strip() == key:
            result[solution.name] = read_records(stored)
            continue
        cache.mkdir(parents=True, exist_ok=True)
        folder = cache / f"{lesson}-{solution.stem}-{key}"
        with open(cache / f"{lesson}.lock", "w") as lock:  # parallel graders share one run
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (folder / "done").exists():
                start = time.perf_counter()
                errors = run_reference(solution, folder, use_sandbox=use_sandbox)
                if errors:
                    raise RuntimeError(f"the solution of {lesson} fails its own tests, so it cannot be the "
                                       f"reference for grading: {errors[:3]}")
                (folder / "done").write_text(json.dumps({"seconds": round(time.perf_counter() - start, 1)}))
        result[solution.name] = read_records(folder / "checks")
    return result


def _by_cell(records: list[dict]) -> dict[str, list[dict]]:
    cells: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        cells[record["cell"]].append(record)
    return cells


def compare(reference: list[dict], learner: list[dict]) -> dict[str, tuple[str | None, list[str]]]:
    """{cell: (failure or None, review notes)} for every cell the reference made checks in."""
    theirs = _by_cell(learner)
    verdicts = {}
    for cell, expected_checks in _by_cell(reference).items():
        got_checks, notes = theirs.get(cell, []), []
        failure = None
        for i, ref in enumerate(expected_checks):
            if i >= len(got_checks):
                failure = (f"{len(got_checks)} of its {len(expected_checks)} checks ran" +
                           (f"; the next one is '{ref['options'].get('name') or ref['options'].get('message', '')}'"))
                break
            got = got_checks[i]
            if got["kind"] != ref["kind"]:
                failure = f"check {i + 1} is of another kind ({got['kind']}) than in the reference ({ref['kind']})"
                break
            message = replay_check(ref["kind"], got["actual"], ref["expected"], ref["options"])
            if message is None:
                continue
            same_inputs = replay_check(ref["kind"], got["expected"], ref["expected"], ref["options"]) is None
            if same_inputs or replay_check(ref["kind"], got["actual"], got["expected"], ref["options"]) is not None:
                failure = message
                break
            notes.append(f"check {i + 1} ({ref['options'].get('name', ref['kind'])}) had other inputs than the "
                         "reference run (random state?): judged against the expected value computed in the "
                         "learner's kernel; review")
        if failure is None and len(got_checks) > len(expected_checks):
            failure = f"{len(got_checks)} checks ran where the reference makes {len(expected_checks)}"
        verdicts[cell] = (failure, notes)
    return verdicts


def apply(root: Path, lesson: str, student: str, notebook: str,
          verdicts: dict[str, tuple[str | None, list[str]]]) -> list[str]:
    """Lower to 0 each cell the kernel passed but the grader fails; returns the flags."""
    from nbgrader.api import Gradebook, MissingEntry

    flags, overturned = [], {}
    stem = Path(notebook).stem
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for cell, (failure, notes) in verdicts.items():
            try:
                grade = gb.find_grade(cell, stem, lesson, student)
            except MissingEntry:
                continue
            score = grade.auto_score or 0.0
            if failure is not None and score > 0:
                grade.auto_score = 0.0
                overturned[cell] = failure
                flags.append(f"{cell}: passed in the kernel, failed the grader's replay ({failure[:200]}); scored 0")
            elif failure is None and notes and score > 0:
                flags.append(f"{cell}: {notes[0]}")
        gb.db.commit()
    if overturned:  # the feedback shows why the cell scored 0
        path = root / "autograded" / student / lesson / notebook
        if path.exists():
            nb = nbformat.read(path, as_version=4)
            for cell in nb.cells:
                message = overturned.get(nbgrader_meta(cell).get("grade_id")) if is_test_cell(cell) else None
                if message is not None:
                    cell.outputs.append(nbformat.v4.new_output("error", ename="AssertionError", evalue=message,
                                                               traceback=[f"AssertionError: {message}"]))
            nbformat.write(nb, path)
    return flags


def main(argv: list[str]) -> int:
    """python tools/verdicts.py LESSON [--no-sandbox]: run the solution as the reference and list
    how many checks each graded test cell records (a hidden test with none is not replayed)."""
    lessons = [a for a in argv if not a.startswith("--")]
    for lesson in lessons:
        start = time.perf_counter()
        records = reference_records(ROOT, lesson, use_sandbox="--no-sandbox" not in argv and sandbox.bwrap_path() is not None)
        print(f"{lesson}: reference in {time.perf_counter() - start:.1f} s")
        for name, checks in records.items():
            counts = {cell: len(c) for cell, c in _by_cell(checks).items()}
            nb = nbformat.read(ROOT / "solutions" / lesson / name, as_version=4)
            for cell in nb.cells:
                if is_test_cell(cell):
                    grade_id = nbgrader_meta(cell)["grade_id"]
                    print(f"  {grade_id:<32} {counts.get(grade_id, 0):>3} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
