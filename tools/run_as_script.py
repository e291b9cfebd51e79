"""Run a notebook's code cells as one plain Python script, cell by cell, in one namespace.

For machines without Jupyter (the lent GPU machine has PyTorch but no nbclient): prints each
cell's output and wall time, and stops at the first failing cell with its index. Lines that are
IPython magics or shell escapes (`%...`, `!...`) are skipped; matplotlib draws off-screen.

With `--record DIR` it runs as the grader runs the instructor's solution (COURSE_GRADING=1, the
tests' checks recorded into DIR, each test cell announced; `--graded`: as a submission's,
with no expected value computed) and goes on past failing cells; then
`python tools/compare_records.py LESSON DIR` compares the records with the stored reference run,
which is how the course checks that a right answer earns its points on another machine.

    python tools/run_as_script.py solutions/10_your_gpt/10_your_gpt.ipynb [--stop-after N]
    python tools/run_as_script.py solutions/03_attention/03_attention.ipynb --record /tmp/rec03
"""

from __future__ import annotations

import argparse
import json
import linecache
import os
import sys
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository's packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.cells import cell_source, is_test_cell, nbgrader_meta  # noqa: E402 (plain JSON cells; no nbformat)


def code_cells(path: Path) -> list[tuple[int, str, str | None]]:
    """(index, source without magics, grade_id if it is a graded test cell) of each code cell."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    out = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        lines = [line for line in cell_source(cell).splitlines() if not line.lstrip().startswith(("%", "!"))]
        out.append((index, "\n".join(lines), nbgrader_meta(cell).get("grade_id") if is_test_cell(cell) else None))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--stop-after", type=int, default=None, help="the last cell index to run")
    parser.add_argument("--record", type=Path, default=None,
                        help="record the tests' checks here, as while grading")
    parser.add_argument("--graded", action="store_true",
                        help="with --record: run the test cells as a submission's are graded (no expected values)")
    args = parser.parse_args()
    os.environ.setdefault("MPLBACKEND", "Agg")
    if args.record is not None:
        if args.graded:  # before course_lib.grading is imported: it reads it once
            os.environ["COURSE_WITHHOLD_EXPECTED"] = "1"
        from course_lib.grading_env import GRADING_ENV, RECORD_ENV
        os.environ[RECORD_ENV] = str(args.record.resolve())
        os.environ[GRADING_ENV] = "1"
    os.chdir(args.notebook.parent)            # notebooks read and write beside themselves
    sys.path.insert(0, ".")
    namespace: dict = {"__name__": "__main__"}
    failed = []
    for index, source, test in code_cells(Path(args.notebook.name)):
        if args.stop_after is not None and index > args.stop_after:
            break
        print(f"\n--- cell {index}" + (f" (test {test})" if test else ""), flush=True)
        if test and args.record is not None:
            from course_lib.grading import announcement
            exec(announcement(test), namespace)  # noqa: S102 (as the grader announces a test cell)
        start = time.perf_counter()
        filename = f"<cell {index}>"
        # as IPython does: the source is findable, which inspect (and so @triton.jit) needs
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        try:
            exec(compile(source, filename, "exec"), namespace)
        except Exception:
            traceback.print_exc()
            print(f"--- cell {index} failed after {time.perf_counter() - start:.1f} s", flush=True)
            failed.append(index)
            if args.record is None:
                return 1
            continue
        print(f"--- cell {index}: {time.perf_counter() - start:.1f} s", flush=True)
    if failed:
        print(f"failed cells: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
