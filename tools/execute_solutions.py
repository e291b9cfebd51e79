"""Execute solution notebooks in place, storing the outputs that nbval compares.

    python tools/execute_solutions.py 00_setup 01_tokenization
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

if __package__ in (None, ""):  # run as a script: make `tools` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.nbtools import lesson_names  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"  # the maintainers' offline corpus, as in CI
if "COURSE_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["COURSE_DATA_DIR"] = str(SHARED_DATA)


def execute(lesson: str, timeout: int = 600) -> float:
    path = ROOT / "solutions" / lesson / f"{lesson}.ipynb"
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="llm-course",
        record_timing=False,
        store_widget_state=True,  # JupyterLab then renders the saved widgets, not "model not found"
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    elapsed = time.perf_counter() - start
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # timestamps would leak into the release
    nbformat.write(nb, path)
    return elapsed


if __name__ == "__main__":
    lessons = sys.argv[1:] or lesson_names(ROOT)
    for lesson in lessons:
        print(f"{lesson}: executed in {execute(lesson):.1f} s", flush=True)
