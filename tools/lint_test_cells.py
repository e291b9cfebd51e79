"""The authoring lint for graded test cells: a test cell only observes.

While a submission is graded its kernel runs each test cell as written, with no expected value:
checks never call their `expect=` function, and `if expecting():` blocks are skipped
(course_lib/grading.py). This lint makes sure nothing else in a test cell computes one:

- every check (`assert_tensor_close`, `assert_equal`, ...) takes its expected value as
  `expect=lambda: ...`;
- every name a test cell binds where the grading run goes is read there as data: an input given
  to the learner's code, an observation a check records, a setting or a label of the test. A
  name read only by `expect=` functions, `if expecting():` blocks or an `assert_true` condition
  is an expected value held in the kernel: move it under `if expecting():` (or compare it with a
  check's `expect=`);
- a name bound only under `if expecting():` is never read where the grading run goes.

A name assigned from a call of the learner's code (the functions and classes the answer cells
define, `assert_raises`) is an observation, whatever reads it.

    python tools/lint_test_cells.py solutions/*/*.ipynb
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

CHECKS = ("assert_tensor_close", "assert_equal", "assert_sequence_equal", "assert_number_close", "assert_shape")
MESSAGE_ARGUMENTS = ("name", "hint", "message")
#: Names a test may bind and never read (a loop's throwaway counter).
THROWAWAY = ("_",)


@dataclass(frozen=True)
class Problem:
    cell: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.cell}, line {self.line}: {self.text}"


def _callee(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _is_expecting(test: ast.AST) -> bool:
    """`expecting()`: the test of a block (or an expression) the grading run skips."""
    return isinstance(test, ast.Call) and _callee(test) == "expecting"


class _Regions(ast.NodeVisitor):
    """Sorts a cell's name uses by where they happen: `data` (read where grading runs, as data),
    `soft` (by an `assert_true` condition), `message` (by a check's name, hint or message, or a
    case's description), `skipped` (in an `expect=` function or an `if expecting():` block); and
    bindings the same way."""

    def __init__(self, learner: set[str] = frozenset()):
        # what the learner's code gave, and the test's literal settings: never an expected value
        self.observations: set[str] = set(learner) | {"assert_raises"}
        self.data: set[str] = set()
        self.soft: set[str] = set()
        self.messages: set[str] = set()
        self.skipped_loads: set[str] = set()
        self.bound: dict[str, int] = {}  # bound where grading runs: first line
        self.skipped_bound: dict[str, int] = {}
        self.problems: list[tuple[int, str]] = []
        self._mode = "data"

    def _weaker(self, mode: str) -> str:
        """`mode` where the grading run goes; inside a skipped region everything stays skipped."""
        return mode if self._mode == "data" else self._mode

    def _in(self, mode: str, nodes) -> None:
        previous, self._mode = self._mode, mode
        for node in nodes:
            if node is not None:
                self.visit(node)
        self._mode = previous

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            {"data": self.data, "soft": self.soft, "message": self.messages,
             "skipped": self.skipped_loads}[self._mode].add(node.id)
        else:
            (self.skipped_bound if self._mode == "skipped" else self.bound).setdefault(node.id, node.lineno)

    def _bind(self, name: str | None, line: int) -> None:
        if name:
            (self.skipped_bound if self._mode == "skipped" else self.bound).setdefault(name.split(".")[0], line)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._bind(node.name, node.lineno)
        self._in(self._mode, [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults, node.args])
        self._in(self._mode, node.body)  # a helper's body runs where it is called

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._bind(node.name, node.lineno)
        self._in(self._mode, [*node.bases, *node.body])

    def visit_arg(self, node: ast.arg) -> None:
        self._bind(node.arg, node.lineno)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self._bind(node.name, node.lineno)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        pass  # a module or function imported is a name for code, not a value

    visit_ImportFrom = visit_Import

    def visit_Assign(self, node: ast.Assign) -> None:
        """A name assigned from a call of the learner's code (or from an observation) is an
        observation itself, whatever reads it."""
        if self._mode == "data" and self._observes(node.value):
            self.observations |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        self.generic_visit(node)

    def _observes(self, node: ast.AST) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                root = sub.func
                while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
                    root = root.func if isinstance(root, ast.Call) else root.value
                if isinstance(root, ast.Name) and root.id in self.observations:
                    return True
        return False

    def visit_For(self, node: ast.For) -> None:
        """`for key in ("a", "b"):` binds settings of the test (labels, options), never values."""
        if (self._mode == "data" and isinstance(node.iter, (ast.Tuple, ast.List, ast.Set))
                and all(isinstance(e, ast.Constant) for e in node.iter.elts)):
            self.observations |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        if _is_expecting(node.test):  # `a if expecting() else b`
            self._in("skipped", [node.body])
            self._in(self._mode, [node.orelse])
        else:
            self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        if _is_expecting(node.test) and not node.orelse:
            self._in("skipped", node.body)
        else:
            self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _callee(node)
        if name in CHECKS:
            self.visit(node.func)
            self._in(self._mode, node.args[:1])
            if len(node.args) > 1:
                self.problems.append((node.lineno, f"{name} is given its expected value as an argument: "
                                                   "write expect=lambda: <the expected value>"))
            for keyword in node.keywords:
                if keyword.arg == "expect":
                    if not isinstance(keyword.value, ast.Lambda):
                        self.problems.append((node.lineno, f"{name}(..., expect=...) takes a lambda"))
                    self._in("skipped", [keyword.value])
                elif keyword.arg in MESSAGE_ARGUMENTS:
                    self._in(self._weaker("message"), [keyword.value])
                else:
                    self.visit(keyword.value)
            if not any(k.arg == "expect" for k in node.keywords) and len(node.args) < 2:
                self.problems.append((node.lineno, f"{name} needs expect=lambda: <the expected value>"))
            return
        if name == "assert_true":
            self.visit(node.func)
            self._in(self._weaker("soft"), node.args[:1])
            self._in(self._weaker("message"), [*node.args[1:], *(k.value for k in node.keywords)])
            return
        if name == "case":
            self.visit(node.func)
            self._in(self._weaker("message"), [*node.args, *(k.value for k in node.keywords)])
            return
        self.generic_visit(node)


def lint_cell(cell: str, source: str, read_elsewhere: set[str], learner: set[str] = frozenset()) -> list[Problem]:
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return [Problem(cell, error.lineno or 0, f"does not parse: {error.msg}")]
    regions = _Regions(learner)
    regions.visit(tree)
    problems = [Problem(cell, line, text) for line, text in regions.problems]
    for name, line in sorted(regions.bound.items(), key=lambda item: item[1]):
        if name in regions.data or name in read_elsewhere or name in THROWAWAY or name in regions.observations:
            continue
        if name in regions.skipped_loads or name in regions.soft:
            problems.append(Problem(cell, line, f"{name!r} is computed while grading but read only by expected "
                                                "values or assert_true conditions: compute it under `if expecting():` "
                                                "(or compare it with a check's expect=)"))
    for name, line in sorted(regions.skipped_bound.items(), key=lambda item: item[1]):
        if name not in regions.bound and (name in regions.data or name in regions.soft or name in regions.messages):
            problems.append(Problem(cell, line, f"{name!r} is bound under `if expecting():` but read where the "
                                                "grading run goes (it does not exist there)"))
    return problems


def _loads(source: str, test: bool) -> set[str]:
    """The names a cell reads as data (every name, for a cell that is not a test)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    if not test:
        return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    regions = _Regions()
    regions.visit(tree)
    return regions.data


def lint_notebook(path: Path) -> list[Problem]:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    tests = [c for c in code if c.get("metadata", {}).get("nbgrader", {}).get("grade")
             and not c.get("metadata", {}).get("nbgrader", {}).get("solution")]
    learner = set()
    for cell in code:
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    learner.add(node.name)
                elif isinstance(node, ast.Assign):
                    learner |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    problems = []
    for cell in tests:
        elsewhere = set().union(*(_loads(c.source, any(c is t for t in tests)) for c in code if c is not cell))
        problems += lint_cell(cell.metadata["nbgrader"]["grade_id"], cell.source, elsewhere, learner)
    return problems


def main(argv: list[str]) -> int:
    problems = [f"{path}: {problem}" for path in argv for problem in lint_notebook(Path(path))]
    print("\n".join(problems) or f"{len(argv)} notebook(s): every test cell only observes")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
