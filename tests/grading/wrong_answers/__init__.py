"""Plausible wrong answers, and right answers written differently, for every lesson's exercises.

One module per lesson (`lesson_NN.py`) defines:
- `LESSON`: the lesson folder's name;
- `WRONG`: {answer grade_id: [source, ...]}, at least three mistakes a learner makes per
  exercise (not random noise). The round trip grades the k-th wrong answer of every exercise
  together as one submission (exercises are graded independently); each must lose at least one
  of its exercise's points, and the table in build/round_trip/ names the test cell that caught it;
- `GRADED` (optional, default 3): how many of each exercise's wrong answers, from the first,
  the round trip grades (one submission each); the wrong answers of a contract check go right
  after the first three, so that it grades them;
- `RIGHT` (optional): {answer grade_id: source}, right answers in another style, which must
  keep full marks with no flag;
- `IDIOMS` (optional): {answer grade_id: the idiom its RIGHT answer uses}, the honest corpus of
  unusual styles (type hints, magics, self-checks, getattr(nn, name)...) that the answer
  policy must let through;
- `FORBIDDEN` (optional): {answer grade_id: source} that replaces the lesson's entry in
  tests/grading/submissions.py FORBIDDEN_ANSWERS (answers that call the forbidden reference).

`python tools/try_answers.py LESSON [EXERCISE...]` tries them in one kernel in seconds.
"""

from __future__ import annotations

import importlib
import pkgutil

WRONG_ANSWERS: dict[str, dict[str, list[str]]] = {}
RIGHT_VARIANTS: dict[str, dict[str, str]] = {}
FORBIDDEN_OVERRIDES: dict[str, dict[str, str]] = {}
IDIOM_VARIANTS: dict[str, dict[str, str]] = {}
GRADED_WRONG: dict[str, int] = {}

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("lesson_")):
    _lesson = importlib.import_module(f"{__name__}.{_module}")
    WRONG_ANSWERS[_lesson.LESSON] = _lesson.WRONG
    GRADED_WRONG[_lesson.LESSON] = getattr(_lesson, "GRADED", 3)
    RIGHT_VARIANTS[_lesson.LESSON] = getattr(_lesson, "RIGHT", {})
    if hasattr(_lesson, "IDIOMS"):
        IDIOM_VARIANTS[_lesson.LESSON] = _lesson.IDIOMS
    if hasattr(_lesson, "FORBIDDEN"):
        FORBIDDEN_OVERRIDES[_lesson.LESSON] = _lesson.FORBIDDEN
