"""Execute solution notebooks in place, storing the outputs that nbval compares, and the
checks their test cells record: the reference that grading replays submissions against
(reference-checks/<lesson>/, see grader/reference.py).

    python tools/execute_solutions.py 00_setup 01_tokenization
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat

if __package__ in (None, ""):  # run as a script: make `tools` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_lib.grading_env import RECORD_ENV  # noqa: E402
from grader import reference  # noqa: E402
from grader.cells import lesson_names  # noqa: E402
from grader.executor import announcing_client  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"  # the maintainers' offline corpus, as in CI
if "COURSE_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["COURSE_DATA_DIR"] = str(SHARED_DATA)


def execute(lesson: str, timeout: int = 600) -> float:
    path = ROOT / "solutions" / lesson / f"{lesson}.ipynb"
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as records:
        os.environ[RECORD_ENV] = records  # the kernel inherits it: test cells record their checks
        try:
            announcing_client(
                nb,
                timeout=timeout,
                kernel_name="llm-course",
                record_timing=False,
                store_widget_state=True,  # JupyterLab then renders the saved widgets, not "model not found"
                resources={"metadata": {"path": str(path.parent)}},
            ).execute()
        finally:
            os.environ.pop(RECORD_ENV, None)
        elapsed = time.perf_counter() - start
        count = reference.store_reference(Path(records), ROOT, lesson, path)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # timestamps would leak into the release
    nbformat.write(nb, path)
    print(f"{lesson}: {count} checks stored in {reference.STORED}/{lesson}/", flush=True)
    return elapsed


if __name__ == "__main__":
    lessons = sys.argv[1:] or lesson_names(ROOT)
    for lesson in lessons:
        print(f"{lesson}: executed in {execute(lesson):.1f} s", flush=True)
