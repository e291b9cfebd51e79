"""The library grows lesson by lesson: a module of lesson k imports only modules of lessons <= k
and the shared ones. `LESSON_OF` is the map from modules to lessons (CONTRIBUTING.md, "Where code
goes", is the same table in prose); the most specific entry of a module wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.reference import imported_modules

ROOT = Path(__file__).resolve().parents[2]
#: Modules every lesson may use: loading data, picking a device, the grading helpers, plots, measuring.
SHARED = ("course_lib", "course_lib.data", "course_lib.device", "course_lib.grading", "course_lib.contracts", "course_lib.viz", "course_lib.vocabulary", "course_lib.grading_env",
          "course_lib.profiling")
LESSON_OF = {
    "course_lib.tokenization": 1,
    "course_lib.embeddings": 2,
    "course_lib.attention": 3,
    "course_lib.attention.dense": 3,
    "course_lib.attention._checks": 3,
    "course_lib.attention.patterns": 4,
    "course_lib.attention.sparse": 4,
    "course_lib.attention.low_rank": 4,
    "course_lib.attention.grouped": 4,
    "course_lib.positional": 5,
    "course_lib.model": 6,
    "course_lib.metrics": 6,
    "course_lib.training": 7,
    "course_lib.pretrained": 7,
    "course_lib.kv_cache": 8,
    "course_lib.generation": 8,
    "course_lib.toy_lm": 9,
    "course_lib.attention.flash": 11,
    "course_lib.attention.flash_triton": 11,
    "course_lib.serving": 12,
    "course_lib.viz.tokens": 1,  # the tokenizer playground
}
#: Known exceptions, each with its reason: (module, the later module it imports).
EXCEPTIONS = {
    ("course_lib.attention.dense", "course_lib.attention.grouped"):
        "lesson 3's MultiHeadAttention takes n_kv_head (grouped-query attention, lesson 4), so that one "
        "class serves the model of lesson 6 on; moving repeat_kv would re-key every stored reference",
}


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _lesson(module: str) -> int | None:
    """The lesson of `module` (its most specific entry), or None for a shared module."""
    for prefix in sorted(LESSON_OF, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return LESSON_OF[prefix]
    if any(module == s or module.startswith(s + ".") for s in SHARED):
        return None
    raise AssertionError(f"{module} is in no lesson: add it to LESSON_OF (tests/unit/test_lesson_order.py) "
                         "and to CONTRIBUTING.md's table")


MODULES = sorted(ROOT.glob("course_lib/**/*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _name(p))
def test_a_module_imports_only_earlier_lessons_and_shared_modules(path):
    module = _name(path)
    lesson = _lesson(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    later = sorted(f"{imported} (lesson {_lesson(imported)})" for imported in imported_modules(path.read_text(), package)
                   if imported.startswith("course_lib") and _lesson(imported) is not None
                   and (lesson is None or _lesson(imported) > lesson) and not imported.startswith(module + ".")
                   and not any((module, imported) == e or (module == e[0] and imported.startswith(e[1] + "."))
                               for e in EXCEPTIONS))
    where = "a shared module" if lesson is None else f"lesson {lesson}"
    assert later == [], f"{module} ({where}) imports a later lesson's module: {later}"


def test_every_known_exception_is_still_needed():
    """An exception whose import is gone is removed from EXCEPTIONS (it would hide a new one)."""
    for module, imported in EXCEPTIONS:
        path = next(p for p in MODULES if _name(p) == module)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        assert any(i == imported or i.startswith(imported + ".") for i in imported_modules(path.read_text(), package)), (
            f"{module} no longer imports {imported}: remove the exception")
