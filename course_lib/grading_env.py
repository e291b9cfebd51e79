"""The names that cross from the grader into a notebook's kernel: environment variables, files and
the sandbox's folder. The grader (`grader/`), the tools, the sandboxed kernel and
`course_lib.grading` all read them from here. Notebooks spell `COURSE_GRADING` out, so that a
learner reads what switches their demos."""

from __future__ import annotations

#: "1" while the grader runs a notebook: demos that earn no points shrink.
GRADING_ENV = "COURSE_GRADING"
#: "1" while `make test` runs the notebooks under nbval: long trainings nbval compares nothing of stop early.
NBVAL_ENV = "COURSE_NBVAL"
#: The folder a kernel's test cells record their checks in (grader/verdicts.py replays them).
RECORD_ENV = "COURSE_GRADING_RECORD"
RECORD_FILE = "checks.jsonl"
#: "1" in a submission's kernel: no expected value is computed there.
WITHHOLD_ENV = "COURSE_WITHHOLD_EXPECTED"
#: The grading batch's seed for hidden inputs (unset or "0": the inputs the notebook states).
SEED_ENV = "COURSE_GRADING_SEED"
#: Inside the sandbox: the grader's modules and the course's course_lib (SANDBOX_DIR/course_lib).
SANDBOX_DIR = "/opt/grading"
#: The most characters a sandboxed kernel outputs, and how its notice that it cut them begins.
OUTPUT_LIMIT_ENV = "LLM_SANDBOX_OUTPUT_CHARS"
OUTPUT_CUT = "[output cut by the grader"
#: What the stub of an unanswered exercise says (grader/nbgrader_plugins.py writes it at release;
#: course_lib.grading shows such an error as that one line).
UNWRITTEN = "is not written yet"
