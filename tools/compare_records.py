"""Compare recorded checks (from `tools/run_as_script.py --record DIR`, run on any machine) with a
lesson's stored reference run, as the grader does: prints each test cell's verdict.

    python tools/compare_records.py 03_attention /tmp/rec03 [--notebook 03_attention]
Exit status 1 when a cell fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.records import read_records
from grader.reference import stored_reference
from grader.verdicts import compare

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lesson")
    parser.add_argument("records", type=Path)
    parser.add_argument("--notebook", default=None, help="default: the lesson's name")
    args = parser.parse_args()
    reference = read_records(stored_reference(ROOT, args.lesson, args.notebook or args.lesson))
    if not reference:
        raise SystemExit(f"no stored reference for {args.lesson}: run `make execute-solutions` first")
    verdicts = compare(reference, read_records(args.records))
    for cell, (failure, notes) in verdicts.items():
        print(f"{args.lesson} {cell}: {'ok' if failure is None else 'FAILS: ' + failure}"
              + (f" ({'; '.join(notes)})" if notes else ""))
    return 1 if any(failure for failure, _ in verdicts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
