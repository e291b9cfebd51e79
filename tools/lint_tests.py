"""Fail on tests that cannot fail.

    python tools/lint_tests.py tests [solutions]

Flags, in test modules (test_*.py) and in the graded test cells of solution notebooks:
- a statement that computes a value and drops it (`x == y` or `torch.allclose(a, b)` without
  `assert`): it asserts nothing;
- a test function, or a graded test cell, with no assertion at all: no `assert`, no
  `raise AssertionError`, `pytest.raises`/`warns`/`fail`, and no call to a helper that asserts
  (a function of the same module whose body asserts, or any function named `assert_*`/`check_*`);
- in a graded test cell, a check that the grader cannot replay: an `assert` statement, or a
  `raise AssertionError` outside an `except` handler. Test cells check through
  the recording helpers of `course_lib.grading` (`assert_tensor_close`, `assert_equal`,
  `assert_number_close`, `assert_raises`, `assert_true`, ...), whose records the grader compares
  with the instructor's run in its own process (grader/verdicts.py). A `raise AssertionError(...)`
  in an `except` handler only turns an error into a message, and stays.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tools` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.cells import cell_source, is_test_cell, nbgrader_meta  # noqa: E402

DROPPED = (ast.Compare, ast.BoolOp, ast.Name, ast.Attribute, ast.Subscript, ast.UnaryOp, ast.BinOp, ast.Tuple, ast.List)
# Calls that return a verdict instead of raising: as a bare statement they check nothing.
VERDICTS = {"allclose", "equal", "isclose", "array_equal", "allequal", "approx", "all", "any", "isfinite", "isnan", "issubset"}


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _asserts(node: ast.AST, asserting_helpers: set[str]) -> bool:
    for child in ast.walk(node):
        if isinstance(child, ast.Assert):
            return True
        if isinstance(child, ast.Raise) and child.exc is not None and "AssertionError" in ast.unparse(child.exc):
            return True
        if isinstance(child, ast.Call):
            name = _call_name(child)
            if name in {"raises", "warns", "fail"} or name.startswith(("assert", "check_")) or name in asserting_helpers:
                return True
    return False


def dropped_values(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, DROPPED):
            lines.append(node.lineno)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and not isinstance(node.value.value, str):
            lines.append(node.lineno)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and _call_name(node.value) in VERDICTS:
            lines.append(node.lineno)
    return lines


def check_source(source: str, where: str, *, whole_is_a_test: bool = False) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return [f"{where}: cannot parse ({error.msg}, line {error.lineno})"]
    problems = [f"{where}:{line}: this statement computes a value and drops it; did you mean `assert ...`?" for line in dropped_values(tree)]
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    helpers: set[str] = set()
    for _ in range(3):  # helpers that call asserting helpers also assert
        helpers |= {f.name for f in functions if not f.name.startswith("test_") and _asserts(f, helpers)}
    for function in functions:
        if function.name.startswith("test_") and not _asserts(function, helpers):
            problems.append(f"{where}:{function.lineno}: {function.name} asserts nothing, so it can never fail")
    if whole_is_a_test and not _asserts(tree, helpers):
        problems.append(f"{where}: this graded test cell asserts nothing, so it can never fail")
    return problems


def unrecorded_checks(source: str) -> list[int]:
    """Lines of `source` where a test cell checks without a recording helper."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    handlers = {id(n) for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler) for n in ast.walk(h)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            lines.append(node.lineno)
        elif (isinstance(node, ast.Raise) and node.exc is not None and "AssertionError" in ast.unparse(node.exc)
              and id(node) not in handlers):
            lines.append(node.lineno)
    return sorted(lines)


def check_notebook(path: Path) -> list[str]:
    problems = []
    for index, cell in enumerate(json.loads(path.read_text())["cells"]):
        if is_test_cell(cell):
            meta = nbgrader_meta(cell)
            source = cell_source(cell)
            source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
            problems += check_source(source, f"{path} cell {index} ({meta.get('grade_id')})", whole_is_a_test=True)
            problems += [
                f"{path} cell {index} ({meta.get('grade_id')}) line {line}: a test checks with "
                "`assert`/`raise AssertionError`, which the grader cannot replay outside the learner's "
                "process; use a recording helper (assert_equal, assert_number_close, assert_raises, "
                "assert_true, ...)"
                for line in unrecorded_checks(source)
            ]
    return problems


def main(paths: list[str]) -> int:
    problems = []
    for root in map(Path, paths or ["tests"]):
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in files:
            if path.suffix == ".py" and path.name.startswith("test_"):
                problems += check_source(path.read_text(), str(path))
            elif path.suffix == ".ipynb" and ".ipynb_checkpoints" not in path.parts:
                problems += check_notebook(path)
    for problem in problems:
        print(problem)
    if problems:
        print(f"\n{len(problems)} problem(s): checks that cannot fail, or that the grader cannot replay.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
