"""What an answer cell may contain, checked by the grader before anything runs.

The hidden tests run in the same Python process as the learner's answers, so an answer that
reaches the grading machinery (the assert helpers, `forbid`, IPython's input transformers,
torch's dispatch internals) could change its own verdict. This module reads each answer cell
as an AST, without running it, and lists what it may not do:

- syntax that is not Python (IPython magics, shell commands);
- imports outside a list of maths, array and typing modules and `course_lib` (never
  `course_lib.grading`), and the standard library's string-keyed doors (`operator.attrgetter`,
  `methodcaller`, `typing.get_type_hints`);
- the built-ins that reach code or namespaces by name: `getattr`, `setattr`, `eval`, `exec`,
  `compile`, `__import__`, `globals`, `vars`, `get_ipython`, `open`, ...;
- dunder names and attributes (`__globals__`, `__code__`, `__builtins__`; `__init__` is allowed,
  classes need it), private attributes (`torch._C`), and the attributes that lead to dispatch,
  frames or the IPython shell (`torch.ops`, `torch.overrides`, `f_globals`, ...);
- assignment to an attribute of anything but `self` or an object the answer built by calling a
  class or function of the notebook (`tok = BPETokenizer(); tok.merges = ...` is fine,
  `torch.isclose = ...`, `F.softmax = ...` and `m = torch; m.isclose = ...` are not);
- rebinding a name that the notebook's own cells import or define (`forbid = ...`,
  `def assert_tensor_close(...)`), or declaring one `global`.

Exercises in this course need none of these. An answer that uses one is withheld: the grader
replaces the cell with a `raise` before grading, so it scores 0, and reports every violation by
name for an instructor to review. What this does not catch is listed in the README's
instructor section.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

ALLOWED_IMPORTS = frozenset({
    "math", "cmath", "collections", "copy", "itertools", "functools", "heapq", "bisect", "dataclasses",
    "re", "regex", "string", "statistics", "random", "numpy", "torch", "torch.nn",
    "torch.nn.functional", "torch.linalg",
    # what careful people write around the maths: annotations, numeric types, operators, timing
    "__future__", "typing", "collections.abc", "abc", "numbers", "operator", "fractions", "decimal",
    "enum", "time", "warnings",
})
FORBIDDEN_MODULE_PREFIXES = ("course_lib.grading",)
FORBIDDEN_NAMES = frozenset({
    "getattr", "setattr", "delattr", "eval", "exec", "compile", "__import__", "globals", "locals",
    "vars", "get_ipython", "open", "breakpoint", "input", "exit", "quit", "help", "memoryview",
    # getattr and eval under other names: attributes picked by a string, annotations evaluated
    "attrgetter", "methodcaller", "get_type_hints", "ForwardRef", "get_annotations",
})
ALLOWED_DUNDERS = frozenset({"__init__"})
FORBIDDEN_ATTRIBUTES = frozenset({
    # torch's dispatch and extension points
    "ops", "overrides", "library", "hub", "package", "jit", "fx", "compiler",
    # frames, code objects and namespaces
    "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "tb_frame", "tb_next", "gi_frame",
    "gi_code", "cr_frame", "cr_code", "ag_frame", "co_code", "modules",
    # the IPython shell
    "user_ns", "user_global_ns", "ast_transformers", "input_transformers_cleanup",
    "input_transformers_post", "events", "kernel", "shell",
    # numpy's door to raw memory
    "ctypeslib", "ctypes",
    # getattr and eval under other names (operator, typing, inspect)
    "attrgetter", "methodcaller", "get_type_hints", "ForwardRef", "get_annotations",
})
# Attributes an answer may set on any object: a tensor's gradient (`p.grad = None` before
# accumulating, as `zero_grad(set_to_none=True)` does).
ASSIGNABLE_ATTRIBUTES = frozenset({"grad"})

MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")  # they would cut the feedback apart


@dataclass(frozen=True)
class Violation:
    line: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.rule} ({self.detail})"


def _module_allowed(module: str) -> bool:
    if any(module == p or module.startswith(p + ".") for p in FORBIDDEN_MODULE_PREFIXES):
        return False
    return module in ALLOWED_IMPORTS or module == "course_lib" or module.startswith("course_lib.")


def _bound_names(target: ast.AST) -> Iterable[ast.Name]:
    if isinstance(target, ast.Name):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _bound_names(element)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)


def _attribute_root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _module_level_statements(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements that run in the notebook's namespace: not inside a def, lambda or class."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from _module_level_statements(getattr(statement, field, []) or [])
        for handler in getattr(statement, "handlers", []) or []:
            yield from _module_level_statements(handler.body)
        for case in getattr(statement, "cases", []) or []:
            yield from _module_level_statements(case.body)


def _module_level_bindings(statement: ast.stmt) -> Iterable[tuple[str, int]]:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield statement.name, statement.lineno
    elif isinstance(statement, (ast.Import, ast.ImportFrom)):
        for alias in statement.names:
            yield (alias.asname or alias.name).split(".")[0], statement.lineno
    elif isinstance(statement, ast.Assign):
        for target in statement.targets:
            for name in _bound_names(target):
                yield name.id, statement.lineno
    elif isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
        for name in _bound_names(statement.target):
            yield name.id, statement.lineno
    elif isinstance(statement, (ast.For, ast.AsyncFor)):
        for name in _bound_names(statement.target):
            yield name.id, statement.lineno
    elif isinstance(statement, (ast.With, ast.AsyncWith)):
        for item in statement.items:
            if item.optional_vars is not None:
                for name in _bound_names(item.optional_vars):
                    yield name.id, statement.lineno
    elif isinstance(statement, ast.Delete):
        for target in statement.targets:
            for name in _bound_names(target):
                yield name.id, statement.lineno


def _built_objects(tree: ast.AST, protected: dict[str, str | None]) -> set[str]:
    """`self`, and the names the answer binds only to the result of calling a class or function
    that the notebook or the answer defines (`tok = BPETokenizer(...)`): objects it made, whose
    attributes it may set. A name that is ever bound to anything else is not one of them."""
    defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    callables = defined | {name for name, dotted in protected.items() if dotted is None or "." in dotted}
    made, other = {"self"}, set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            root = _attribute_root(value.func) if isinstance(value, ast.Call) else None
            ok = isinstance(root, ast.Name) and root.id in callables and not isinstance(value.func, ast.Lambda)
            for target in targets:
                for name in _bound_names(target):
                    (made if ok else other).add(name.id)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.NamedExpr, ast.arguments)):
            for sub in ast.walk(node.target if isinstance(node, (ast.For, ast.AsyncFor, ast.NamedExpr)) else node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    other.add(sub.id)
                if isinstance(sub, ast.arg) and sub.arg != "self":
                    other.add(sub.arg)
    return made - other


def check_answer(source: str, protected: dict[str, str | None] | Iterable[str] = ()) -> list[Violation]:
    """Every violation of the policy in one answer cell; [] when the cell may run.

    `protected` holds the names the tests rely on (see `notebook_definitions`); an answer may
    import such a name again from the same place, but not bind it to anything else.
    """
    protected = dict(protected) if isinstance(protected, dict) else dict.fromkeys(protected)
    violations: list[Violation] = []
    for marker in MARKERS:
        if marker in source:
            violations.append(Violation(0, "grading marker in an answer", repr(marker)))
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        rule = "not Python"
        if any(line.lstrip().startswith(("%", "!")) for line in source.splitlines()):
            rule = "IPython magic or shell command"
        return violations + [Violation(error.lineno or 0, rule, error.msg or "syntax error")]

    built = _built_objects(tree, protected)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _module_allowed(alias.name):
                    violations.append(Violation(line, "import not allowed", alias.name))
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.level or not _module_allowed(module):
                violations.append(Violation(line, "import not allowed", module))
            for alias in node.names:
                full = f"{module}.{alias.name}"
                if (alias.name == "*" or alias.name.startswith("_") or alias.name in FORBIDDEN_NAMES
                        or alias.name in FORBIDDEN_ATTRIBUTES
                        or any(full.startswith(p) for p in FORBIDDEN_MODULE_PREFIXES)):
                    violations.append(Violation(line, "import not allowed", full))
        elif isinstance(node, ast.Name):
            if node.id in FORBIDDEN_NAMES:
                violations.append(Violation(line, "built-in not allowed", node.id))
            elif node.id.startswith("__") and node.id not in ALLOWED_DUNDERS:
                violations.append(Violation(line, "dunder name not allowed", node.id))
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("__") and node.attr.endswith("__"):
                if node.attr not in ALLOWED_DUNDERS:
                    violations.append(Violation(line, "dunder attribute not allowed", node.attr))
            elif node.attr.startswith("_"):
                violations.append(Violation(line, "private attribute not allowed", ast.unparse(node)))
            elif node.attr in FORBIDDEN_ATTRIBUTES:
                violations.append(Violation(line, "attribute not allowed", ast.unparse(node)))
            if isinstance(node.ctx, (ast.Store, ast.Del)) and node.attr not in ASSIGNABLE_ATTRIBUTES:
                root = _attribute_root(node)
                if not (isinstance(root, ast.Name) and root.id in built):
                    violations.append(Violation(line, "assignment to an attribute of something other than self",
                                                ast.unparse(node)))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                if name in protected:
                    violations.append(Violation(line, "global declaration of a name the tests use", name))

    for statement in _module_level_statements(tree.body):
        same_import = {name for name, dotted in _import_targets(statement)
                       if name in protected and protected[name] == dotted}
        for name, line in _module_level_bindings(statement):
            if name in protected and name not in same_import:
                violations.append(Violation(line, "rebinds a name the notebook's own cells define", name))
    return sorted(set(violations), key=lambda v: (v.line, v.rule, v.detail))


def _import_targets(statement: ast.stmt) -> Iterable[tuple[str, str]]:
    """(bound name, dotted path it refers to) for an import statement."""
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            if alias.asname:
                yield alias.asname, alias.name
            else:
                yield alias.name.split(".")[0], alias.name.split(".")[0]
    elif isinstance(statement, ast.ImportFrom) and not statement.level:
        for alias in statement.names:
            yield alias.asname or alias.name, f"{statement.module}.{alias.name}"


def notebook_definitions(sources: Iterable[str]) -> dict[str, str | None]:
    """Names the notebook's own cells import, define or declare at module level.

    Maps each to the dotted path it imports (so an answer may repeat the same import), or to
    None for a def or class. Plain assignments are left out: learners reuse names such as `x`.
    """
    names: dict[str, str | None] = {}
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for statement in _module_level_statements(tree.body):
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[statement.name] = None
            for name, dotted in _import_targets(statement):
                names[name] = dotted
    return names


def withheld_source(grade_id: str, violations: list[Violation]) -> str:
    """What replaces an answer cell that breaks the policy: it scores 0 and says why."""
    reasons = "; ".join(str(v) for v in violations[:5])
    message = (f"answer {grade_id} withheld by the grading policy: {reasons}. "
               "An instructor reviews the original by hand.")
    return f"raise RuntimeError({message!r})"
