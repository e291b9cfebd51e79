"""The instructor's run of a solution, which every submission's checks are replayed against
(grader/verdicts.py).

The solution runs with recording on: every check a test cell makes through `course_lib.grading`'s
helpers records the observed value, the expected value and the check's options (safetensors for
tensors, tagged JSON for the rest; nothing is unpickled). `make execute-solutions` stores these
records in reference-checks/<lesson>/ with a key (the hash of the solution's code and of the
`course_lib` modules the lesson imports, `reference_key`) and the machine it ran on
(`machine_fingerprint`). The stored reference is made with the hidden inputs the notebook states
(seed 0). A grading batch draws its own seed for hidden inputs (`course_lib.grading.hidden_seed`),
and when the seed, the key or the kind of machine differs (another CPU vendor or instruction set,
another torch or NumPy: float32 results differ in the last bits), grading runs the solution once
on this machine with that seed and caches the result (`reference_records`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import nbformat

from course_lib.grading_env import GRADING_ENV, RECORD_ENV, SEED_ENV
from grader import sandbox
from grader.cells import is_test_cell, nbgrader_meta
from grader.course import Course
from grader.executor import announcing_client
from grader.records import consolidate_records, read_records

ROOT = Path(__file__).resolve().parent.parent


STORED = "reference-checks"  # <root>/reference-checks/<lesson>/<notebook>/: the solution's records


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def imported_modules(source: str, package: str | None = None) -> set[str]:
    """The course_lib modules a piece of code imports (absolute, or relative to `package`)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:  # a notebook cell with IPython syntax: read what parses, line by line
        return set().union(*(imported_modules(line.strip(), package) for line in source.splitlines()
                             if line.strip().startswith(("import ", "from "))))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and package:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # submodules imported by name
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__" and node.args:
            if isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return {name for name in found if name == "course_lib" or name.startswith("course_lib.")}


def _module_file(root: Path, name: str) -> Path | None:
    path = root.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def lesson_modules(root: Path, sources: list[str]) -> list[Path]:
    """The course_lib files that code (a lesson's cells) depends on: what it imports, what those
    import within course_lib, the packages around them, and `course_lib.grading` (the recorder)."""
    pending = set().union(*(imported_modules(src) for src in sources)) | {"course_lib.grading"}
    seen: dict[str, Path] = {}
    while pending:
        name = pending.pop()
        parts = name.split(".")
        for k in range(1, len(parts) + 1):  # every package on the way is imported too
            prefix = ".".join(parts[:k])
            if prefix in seen:
                continue
            path = _module_file(root, prefix)
            if path is None:
                continue
            seen[prefix] = path
            package = prefix if path.name == "__init__.py" else prefix.rpartition(".")[0]
            pending |= imported_modules(path.read_text(), package) - seen.keys()
    return sorted(set(seen.values()))


def reference_key(solution: Path, root: Path | None = None) -> str:
    """What the reference records depend on: every code cell of the solution (not its outputs)
    and the course_lib modules those cells import, directly or through course_lib; a change
    elsewhere in course_lib leaves the lesson's stored reference valid."""
    root = (root or solution.resolve().parents[2]).resolve()
    nb = nbformat.read(solution, as_version=4)
    sources = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    digest = hashlib.sha256()
    for path in lesson_modules(root, sources):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    for source in sources:
        digest.update(source.encode() + b"\0")
    return digest.hexdigest()[:16]


def machine_fingerprint() -> str:
    """What a float32 result depends on beyond the code: CPU architecture, vendor and the
    instruction set torch dispatches to, and the torch and NumPy versions. The grader's and its
    kernels' are the same (one venv, one machine); kernels run on one thread."""
    import numpy
    import torch

    vendor = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                vendor = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{platform.machine()} {vendor or platform.processor()} "
            f"{torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}, numpy {numpy.__version__}")


def stored_reference(root: Path, lesson: str, notebook: str) -> Path:
    return root / STORED / lesson / Path(notebook).stem


def store_reference(records: Path, root: Path, lesson: str, solution: Path) -> int:
    """Keep the records of an execution of `solution` as its stored reference; returns the count."""
    folder = stored_reference(root, lesson, solution.name)
    shutil.rmtree(folder, ignore_errors=True)
    count = consolidate_records(records, folder)
    (folder / "key").write_text(reference_key(solution) + "\n")
    (folder / "machine").write_text(machine_fingerprint() + "\n")
    return count


def run_reference(solution: Path, folder: Path, use_sandbox: bool = True, timeout: int = 600,
                  env: dict[str, str] | None = None) -> list[str]:
    """Execute the solution notebook with recording on (and `env` added to the kernel's
    environment); the records land in folder/checks. Returns the errors raised by graded test
    cells (there should be none)."""
    runtime = sandbox.short_runtime_dir()
    record = runtime / "checks"
    spec_folder = runtime.parent / f"{runtime.name}-jupyter"  # outside the one folder the kernel may write
    nb = nbformat.read(solution, as_version=4)
    env = env or {}
    saved = {k: os.environ.get(k) for k in (RECORD_ENV, "JUPYTER_PATH", GRADING_ENV, *env)}
    os.environ.update(env)
    os.environ[RECORD_ENV] = str(record)
    os.environ[GRADING_ENV] = "1"  # run as a submission is graded (grader/sandbox.py)
    try:
        if use_sandbox:
            kernels = sandbox.write_kernel_spec(spec_folder, course=solution.resolve().parents[2])
            os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(kernels), saved["JUPYTER_PATH"]) if p)
            client = announcing_client(nb, timeout=timeout, kernel_name=sandbox.KERNEL_NAME, allow_errors=True,
                                       resources={"metadata": {"path": str(runtime)}})
            client.km = sandbox.connect_through(client.create_kernel_manager(), runtime)
        else:
            client = announcing_client(nb, timeout=timeout, allow_errors=True,
                                       kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"),
                                       resources={"metadata": {"path": str(solution.parent)}})
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "kernel.log", "w") as log:  # the kernel's own output, kept out of the grader's table
            client.execute(stdout=log, stderr=subprocess.STDOUT)
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


def reference_records(root: Path, lesson: str, cache: Path | None = None, use_sandbox: bool = True,
                      seed: int = 0) -> dict:
    """{notebook name: records of the instructor's solution} for the hidden inputs of `seed`. The
    stored reference (reference-checks/, written by `make execute-solutions`) is used for seed 0
    when its key matches the solution and course_lib and it was made on a machine like this one
    (`machine_fingerprint`); otherwise the solution is run once here and cached in `cache`
    (default <root>/.grading/reference), keyed on all three."""
    cache = cache or Course(root).grading / "reference"
    machine = machine_fingerprint()
    result = {}
    for solution in sorted(Course(root).solutions(lesson).glob("*.ipynb")):
        key = reference_key(solution)
        stored = stored_reference(root, lesson, solution.name)
        if seed == 0 and _read(stored / "key") == key and _read(stored / "machine") == machine:
            result[solution.name] = read_records(stored)
            continue
        cache.mkdir(parents=True, exist_ok=True)
        local = hashlib.sha256(f"{key} {machine} {seed}".encode()).hexdigest()[:16]
        folder = cache / f"{lesson}-{solution.stem}-{local}"
        with open(cache / f"{lesson}.lock", "w") as lock:  # parallel graders share one run
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (folder / "done").exists():
                why = (f"hidden inputs of this batch's seed {seed}" if seed else
                       "its stored reference is stale" if _read(stored / "key") != key else
                       f"its stored reference was made on {_read(stored / 'machine') or 'an unrecorded machine'}, "
                       f"this machine is {machine}")
                print(f"{lesson}: running the solution once on this machine ({why})", file=sys.stderr, flush=True)
                start = time.perf_counter()
                errors = run_reference(solution, folder, use_sandbox=use_sandbox, env={SEED_ENV: str(seed)})
                if errors:
                    raise RuntimeError(f"the solution of {lesson} fails its own tests, so it cannot be the "
                                       f"reference for grading: {errors[:3]}")
                (folder / "done").write_text(json.dumps({"seconds": round(time.perf_counter() - start, 1),
                                                         "machine": machine}))
        result[solution.name] = read_records(folder / "checks")
    return result




def main(argv: list[str]) -> int:
    """python -m grader reference LESSON [--no-sandbox]: run the solution as the reference and list
    how many checks each graded test cell records (a hidden test with none is not replayed)."""
    lessons = [a for a in argv if not a.startswith("--")]
    for lesson in lessons:
        start = time.perf_counter()
        records = reference_records(ROOT, lesson, use_sandbox="--no-sandbox" not in argv and sandbox.bwrap_path() is not None)
        print(f"{lesson}: reference in {time.perf_counter() - start:.1f} s")
        for name, checks in records.items():
            counts = Counter(record["cell"] for record in checks)
            nb = nbformat.read(ROOT / "solutions" / lesson / name, as_version=4)
            for cell in nb.cells:
                if is_test_cell(cell):
                    grade_id = nbgrader_meta(cell)["grade_id"]
                    print(f"  {grade_id:<32} {counts.get(grade_id, 0):>3} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
