"""The checks a submission's kernel recorded, read as untrusted data (a real folder of regular
files, within a size, in the recorder's order), and replayed against the instructor's run of the
solution (grader/verdicts.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from grader import sandbox, verdicts
from grader.records import read_records


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
