"""What a graded test cell runs: its checks, and, while grading, none of their expected values.

A test cell is written as a test reads best, for instance

    expected = ref.attention(q, k, v)                  # the expected value
    with forbid(*attention_like):
        out = attention(q, k, v)                       # the learner's answer
    assert_tensor_close(out, expected, name="attention(q, k, v)")

While a submission is graded, the kernel runs it as

    with forbid(*attention_like):
        out = record_inputs(attention, "attention", (0, 1, 2), ())(q, k, v)
    assert_tensor_close(out, WITHHELD, name="attention(q, k, v)")

so the learner's process never computes or holds an expected value: each helper records what the
answer gave (`course_lib.grading`), and the grader compares it, outside the sandbox, with the
expected value of the instructor's run (grader/verdicts.py). The instructor's run executes the
same cell with its expected values kept (mode "reference").

What is removed (mode "grading"):
- every argument of a check (`assert_tensor_close`, `assert_equal`, `assert_sequence_equal`,
  `assert_number_close`, `assert_shape`) but the learner's value: the expected value becomes
  WITHHELD, and tolerances, names and hints (which may quote it) go; the grader words a failure
  with the instructor's run's;
- then every statement that only served those values: an assignment (or a change such as
  `expected.append(...)` to an object the cell made) whose names nothing that remains reads, that
  calls no learner code and changes nothing shared; and in `for got, want in zip(gots, wants)`,
  the sequence whose loop name nothing reads. The notebook's other cells count as readers.

What is added (both modes): each call of the learner's code by name records a digest of the
arguments the test built itself (not those derived from the learner's earlier results, nor those an earlier
call of the learner's code could have changed in place). The grader compares them with the
instructor's run: a check that fails on other inputs than the instructor's is flagged.

Learner code means the names the notebook's answer cells define, and every name assigned from
them (a model built from the learner's class, the learner's outputs).
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from grader.cells import (
    END_HIDDEN_TESTS_MARKER,
    HIDDEN_TESTS_MARKER,
    cell_source,
    is_answer_cell,
    is_test_cell,
    nbgrader_meta,
)

#: The checks whose expected value (their second argument) the kernel never gets while grading.
CHECKS = ("assert_tensor_close", "assert_equal", "assert_sequence_equal", "assert_number_close", "assert_shape")
_GRADING = '__import__("course_lib.grading", fromlist=["_"])'
#: The environment variable that names the JSON file of a lesson's graded sources (autograde).
SOURCES_ENV = "COURSE_GRADED_SOURCES"


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _loads(node: ast.AST | None) -> set[str]:
    """The names `node` reads, less those its comprehensions bind for themselves."""
    if node is None:
        return set()
    local = {n.id for c in ast.walk(node) if isinstance(c, ast.comprehension)
             for n in ast.walk(c.target) if isinstance(n, ast.Name)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - local


def _target_names(target: ast.AST) -> set[str]:
    """The names an assignment target binds or changes: `x`, `x, y`, `x[i]` and `x.a` give x."""
    if isinstance(target, ast.Name):
        return {target.id} - {"_"}  # `_` holds what a test throws away
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(t) for t in target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    if isinstance(target, (ast.Subscript, ast.Attribute)):
        return _target_names(target.value)
    return set()


def _target_loads(target: ast.AST) -> set[str]:
    """Names read by a target itself (`x[i] = ...` reads i; the base x is what it changes)."""
    if isinstance(target, ast.Subscript):
        return _target_loads(target.value) | _loads(target.slice)
    if isinstance(target, ast.Attribute):
        return _target_loads(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_loads(t) for t in target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return _target_loads(target.value)
    return set()


def _base_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _bound_names(tree: ast.Module) -> set[str]:
    """Names a cell binds at its top level (defs, classes, assignments)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, (ast.Name, ast.Tuple, ast.List)):
                    names |= _target_names(target)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _assignments(tree: ast.AST):
    """(bound names, value) of every assignment-like node in `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            yield set().union(*(_target_names(t) for t in node.targets)), node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            yield _target_names(node.target), node.value
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            yield _target_names(node.target), node.iter
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    yield _target_names(item.optional_vars), item.context_expr
        elif isinstance(node, ast.NamedExpr):
            yield {node.target.id}, node.value


def _bound_anywhere(tree: ast.AST) -> set[str]:
    """Every name a cell binds, at any depth: assignments, loop and `with` targets, definitions,
    parameters, imports."""
    names: set[str] = set()
    for bound, _ in _assignments(tree):
        names |= bound
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _answer_names(nb) -> set[str]:
    names: set[str] = set()
    for cell in _cells(nb):
        if is_answer_cell(cell) and (tree := _parse(cell_source(cell))) is not None:
            names |= _bound_names(tree)
    return names


def _tainted(tree: ast.AST, start: set[str]) -> set[str]:
    """`start` and every name the cell assigns from them (flow-insensitive, within the cell)."""
    learner = set(start)
    changed = True
    while changed:
        changed = False
        for names, value in _assignments(tree):
            if value is not None and _loads(value) & learner and not names <= learner:
                learner |= names
                changed = True
    return learner


def learner_code(nb) -> list[set[str]]:
    """For each graded test cell of a notebook, in order, the names of the learner's code there:
    what the answer cells define, every name the cell assigns from them, and those an earlier test
    cell tainted that this cell does not bind again."""
    answers = _answer_names(nb)
    result, earlier = [], set()
    for cell in _cells(nb):
        if not is_test_cell(cell) or (tree := _parse(cell_source(cell))) is None:
            continue
        tainted = _tainted(tree, answers | (earlier - _bound_anywhere(tree)))
        result.append(tainted)
        earlier |= tainted - answers
    return result


# --- Removing the expected values ---------------------------------------------------------------


class _Withhold(ast.NodeTransformer):
    """Keeps of every check only the learner's value, and gives it WITHHELD as its expected value:
    the grader words a failure with the instructor's run's options (tolerances, names, hints),
    which may quote an expected value, so the kernel needs none of them."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if (isinstance(node.func, ast.Name) and node.func.id in CHECKS and node.args
                and not isinstance(node.args[0], ast.Starred)):
            node.args = [node.args[0], ast.parse(f"{_GRADING}.WITHHELD", mode="eval").body]
            node.keywords = []
        return node


@dataclass
class _Unit:
    """One statement (or a compound statement's header) for the liveness analysis."""

    node: ast.stmt
    defines: set[str]
    uses: set[str]
    root: bool
    parent: _Unit | None
    removable: bool
    live: bool = False
    #: (names, reads): reads that count only once one of names is read (a zip's sequences)
    conditional: list[tuple[set[str], set[str]]] = field(default_factory=list)


_VIEWS = {"view", "view_as", "reshape", "transpose", "permute", "expand", "expand_as", "narrow", "select",
          "unsqueeze", "squeeze", "flatten", "unflatten", "detach", "t", "diagonal", "unbind", "split", "chunk",
          "as_strided", "movedim", "swapaxes", "parameters", "named_parameters", "buffers", "modules", "children",
          "state_dict", "values", "items", "keys", "get", "get_parameter", "get_submodule", "__getitem__"}


def _fresh_value(value: ast.AST) -> bool:
    """Whether an expression makes a new object, not a view or another name for a live one (nor
    a handle on a change it made to one, such as a hook to remove later)."""
    if _changes_shared(value, set()):
        return False
    if isinstance(value, ast.Call):
        return not (isinstance(value.func, ast.Attribute) and value.func.attr in _VIEWS)
    if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        return all(_fresh_value(e) for e in value.elts)
    return isinstance(value, (ast.Dict, ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.Constant,
                              ast.BinOp, ast.UnaryOp, ast.JoinedStr, ast.Compare, ast.BoolOp))


#: Methods that change their object (or the process), beside torch's in-place `name_` ones.
_CHANGES = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "add", "discard",
            "register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook", "register_hook",
            "register_buffer", "register_parameter", "register_module", "add_module", "load_state_dict",
            "zero_grad", "step", "backward", "train", "eval", "to", "cuda", "cpu", "apply", "write", "close",
            "seek", "manual_seed", "seed", "set_rng_state", "save", "mkdir", "unlink", "rmtree", "makedirs"}


def _changes_shared(value: ast.AST, fresh: set[str]) -> bool:
    """Whether an expression calls a method that changes an object the test did not make here
    (`model.register_forward_pre_hook(...)`, `x.add_(1)`, `shutil.rmtree(...)`), or backward()."""
    for node in ast.walk(value):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            changes = attr in _CHANGES or (attr.endswith("_") and not attr.startswith("__"))
            base = _base_name(node.func)
            if attr == "backward" or (changes and base is not None and base not in fresh):
                return True
    return False


def _fresh_names(tree: ast.AST) -> set[str]:
    """The names a cell binds only to new objects (`x = f(...)`, `x = []`), which a test may
    change in place without touching anything else: changes to them are removable with them."""
    fresh: set[str] = set()
    other: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    (fresh if _fresh_value(node.value) else other).add(target.id)
                elif isinstance(target, (ast.Tuple, ast.List)):
                    names = _target_names(target)
                    (fresh if isinstance(node.value, ast.Call) and _fresh_value(node.value) else other).update(names)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            (fresh if _fresh_value(node.value) else other).add(node.target.id)
    return fresh - (other | (_bound_anywhere(tree) - fresh))


def _statement_units(body: list[ast.stmt], parent: _Unit | None, learner: set[str], program: list[_Unit],
                     fresh: set[str]) -> None:
    for node in body:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defines = set().union(*(_target_names(t) for t in targets))
            uses = _loads(node.value) | set().union(*(_target_loads(t) for t in targets))
            changed = set().union(set(), *(_target_names(t) for t in targets if not isinstance(t, (ast.Name, ast.Tuple, ast.List))))
            if isinstance(node, ast.AugAssign):
                uses |= defines
                changed |= defines  # `x += y` changes a tensor in place
            # learner code runs, the learner's names are rebound (stand-ins the answer will call), or
            # an object that may be another name's (a view, a loop variable) is changed in place
            keep = bool(_loads(node.value) & learner or defines & learner or not defines or changed - fresh
                        or (node.value is not None and _changes_shared(node.value, fresh)))
            program.append(_Unit(node, defines, uses, root=keep, parent=parent, removable=not keep))
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Attribute) and (base := _base_name(node.value.func)) is not None
              and base in fresh - learner and not (_loads(node.value) & learner)
              and not _changes_shared(node.value, fresh)):
            # expected.append(...), reference.load_state_dict(...): a change to a new object only
            program.append(_Unit(node, {base}, _loads(node.value), root=False, parent=parent, removable=True))
        elif isinstance(node, ast.ClassDef):  # whole: its attributes are read as Class.name
            program.append(_Unit(node, {node.name}, _loads(node), root=False, parent=parent, removable=True))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            header = set().union(*(_loads(d) for d in node.decorator_list))
            header |= set().union(*(_loads(d) for d in node.args.defaults + node.args.kw_defaults if d))
            unit = _Unit(node, {node.name}, header, root=False, parent=parent, removable=True)
            program.append(unit)
            _statement_units(node.body, unit, learner, program, fresh)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try)):
            header: set[str] = set()
            defines: set[str] = set()
            conditional = []
            if isinstance(node, (ast.For, ast.AsyncFor)):
                header, defines = _loads(node.iter), _target_names(node.target)
                if (parts := _zip_parts(node)) is not None:
                    header, conditional = parts
            elif isinstance(node, (ast.While, ast.If)):
                header = _loads(node.test)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    header |= _loads(item.context_expr)
                    if item.optional_vars is not None:
                        defines |= _target_names(item.optional_vars)
            else:
                for handler in node.handlers:
                    header |= _loads(handler.type)
            unit = _Unit(node, defines, header, root=True, parent=parent, removable=False, conditional=conditional)
            program.append(unit)
            for name in ("body", "orelse", "finalbody"):
                _statement_units(getattr(node, name, []), unit, learner, program, fresh)
            for handler in getattr(node, "handlers", []):
                _statement_units(handler.body, unit, learner, program, fresh)
        else:  # a call, return, raise, import, ...: always runs where its block runs
            program.append(_Unit(node, set(), _loads(node), root=True, parent=parent, removable=False))


def _liveness(program: list[_Unit], outside_loads: set[str]) -> set[str]:
    """Marks the units that must run; returns the names they read."""
    live_names = set(outside_loads)
    changed = True
    while changed:
        changed = False
        for unit in program:
            if unit.live or (unit.parent is not None and not unit.parent.live):
                continue
            if unit.root or unit.defines & live_names:
                unit.live = True
                live_names |= unit.uses
                changed = True
        for unit in program:
            if unit.live:
                for names, reads in unit.conditional:
                    if names & live_names and not reads <= live_names:
                        live_names |= reads
                        changed = True
    return live_names


def _zip_loop(node: ast.For | ast.AsyncFor) -> tuple[ast.AST, ast.Tuple, ast.Call] | None:
    """(holder, target tuple, zip call) of `for a, b in zip(A, B)` or `for i, (a, b) in
    enumerate(zip(A, B))`; None for other loops."""
    holder, target, iterable = node, node.target, node.iter
    if (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate"
            and len(iterable.args) == 1 and isinstance(target, ast.Tuple) and len(target.elts) == 2):
        holder, target, iterable = iterable, target.elts[1], iterable.args[0]
    if (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "zip"
            and isinstance(target, ast.Tuple) and len(target.elts) == len(iterable.args) > 1
            and not any(isinstance(a, ast.Starred) for a in [*iterable.args, *target.elts])):
        return holder, target, iterable
    return None


def _zip_parts(node: ast.For | ast.AsyncFor) -> tuple[set[str], list[tuple[set[str], set[str]]]] | None:
    """A zip loop's header reads: (what it always reads, [(an element's names, its sequence's
    reads)]): a sequence is read only if its element is."""
    if (found := _zip_loop(node)) is None:
        return None
    holder, target, call = found
    always = set().union(set(), *(_loads(k.value) for k in call.keywords))
    if holder is not node:
        always |= _loads(node.iter) - set().union(*(_loads(a) for a in call.args))
    return always, [(_target_names(t), _loads(a)) for t, a in zip(target.elts, call.args, strict=True)]


def _prune_zips(tree: ast.AST, live: set[str]) -> bool:
    """In `for a, b in zip(A, B)` (or `enumerate(zip(...))`), drop the sequences whose loop
    names nothing reads any more (the expected values a test walked beside the answer's).
    Returns whether anything changed."""
    changed = False
    for node in ast.walk(tree):
        if not isinstance(node, (ast.For, ast.AsyncFor)) or (found := _zip_loop(node)) is None:
            continue
        holder, target, call = found
        keep = [i for i, t in enumerate(target.elts) if _target_names(t) & live] or [0]
        if len(keep) == len(target.elts):
            continue
        if len(keep) == 1:
            new_target, new_iter = target.elts[keep[0]], call.args[keep[0]]
        else:
            new_target = ast.Tuple([target.elts[i] for i in keep], ast.Store())
            new_iter = ast.Call(call.func, [call.args[i] for i in keep], call.keywords)
        if holder is node:
            node.target, node.iter = new_target, new_iter
        else:  # enumerate(zip(...))
            node.target.elts[1], holder.args[0] = new_target, new_iter
        changed = True
    return changed


class _Sweep(ast.NodeTransformer):
    """Drops the statements found dead; a block left empty gets `pass`."""

    def __init__(self, dead: set[int]):
        self.dead = dead

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [s for s in body if id(s) not in self.dead]
                setattr(node, name, kept or ([] if isinstance(node, ast.Module) else [ast.Pass()]))
        return super().generic_visit(node)


# --- Recording the inputs of each call of the learner's code -----------------------------------


def _positions(tree: ast.AST) -> list[tuple[tuple[int, int], ast.Call, ast.AST | None]]:
    """Every call in `tree` with its position and its innermost enclosing loop."""
    found = []

    def walk(node: ast.AST, loop: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.For, ast.AsyncFor, ast.While)) else loop
            if isinstance(child, ast.Call):
                found.append(((child.lineno, child.col_offset), child, loop))
            walk(child, inner)

    walk(tree, None)
    return sorted(found, key=lambda item: item[0])


def _is_learner_call(call: ast.Call, learner: set[str]) -> bool:
    """A call of the learner's code by name: `attention(q, k, v)`, `model(x)`. Method calls
    (`sizes.append(n)`, `model.generate(...)`) are not fingerprinted: their receiver may be a
    value the learner's code made, and their arguments measurements of it."""
    return isinstance(call.func, ast.Name) and call.func.id in learner


def _given(node: ast.AST) -> set[str]:
    """The names whose objects a call receives itself (`x`, `x[0]`, `m.weight`, in tuples too),
    which it could change in place; not those it only sees a result of (`x.clone()`, `x + 1`)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_given(e) for e in node.elts)) if node.elts else set()
    if isinstance(node, ast.Starred):
        return _given(node.value)
    if isinstance(node, (ast.Name, ast.Subscript, ast.Attribute)):
        return {name} if (name := _base_name(node)) is not None else set()
    return set()


def _argument_names(call: ast.Call) -> set[str]:
    return set().union(set(), *(_given(a) for a in call.args), *(_given(k.value) for k in call.keywords))


class _RecordInputs(ast.NodeTransformer):
    def __init__(self, recordable: dict[int, tuple[tuple[int, ...], tuple[str, ...]]]):
        self.recordable = recordable

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if id(node) not in self.recordable:
            return node
        positions, keywords = self.recordable[id(node)]
        label = ast.unparse(node.func)
        wrapper = ast.parse(f"{_GRADING}.record_inputs(_f, {label!r}, {positions!r}, {keywords!r})",
                            mode="eval").body
        wrapper.args[0] = node.func
        node.func = wrapper
        return node


def _recordable(trees: list[ast.Module], learners: list[set[str]]) -> dict[int, tuple[tuple[int, ...], tuple[str, ...]]]:
    """For each call of the learner's code, the arguments built by the test alone: no learner
    name in them, and no name an earlier call (or a call in the same loop) was given."""
    result = {}
    given: set[str] = set()
    for tree, learner in zip(trees, learners, strict=True):
        given -= _bound_anywhere(tree)  # rebound here: new objects
        calls = [(p, c, loop) for p, c, loop in _positions(tree) if _is_learner_call(c, learner)]
        in_loop: dict[int, set[str]] = {}
        for _, call, loop in calls:
            if loop is not None:
                in_loop.setdefault(id(loop), set()).update(_argument_names(call))
        for _, call, loop in calls:
            unsafe = learner | given | (in_loop.get(id(loop), set()) if loop is not None else set())
            positions = tuple(i for i, a in enumerate(call.args)
                              if not isinstance(a, ast.Starred) and not (_loads(a) & unsafe))
            keywords = tuple(k.arg for k in call.keywords if k.arg is not None and not (_loads(k.value) & unsafe))
            if positions or keywords:
                result[id(call)] = (positions, keywords)
            given |= _argument_names(call)
    return result


# --- A notebook's graded sources ---------------------------------------------------------------


def graded_sources(nb, mode: str) -> dict[str, str]:
    """{grade_id: source} of every graded test cell of `nb` (the instructor's solution; an
    nbformat notebook or its plain JSON), as the
    kernel runs it: mode "reference" (the instructor's run: expected values kept) or "grading"
    (a submission: expected values removed). Both record the inputs of the learner's calls."""
    if mode not in ("reference", "grading"):
        raise ValueError(f"mode must be 'reference' or 'grading', not {mode!r}")
    learners = learner_code(nb)
    tests = [(nbgrader_meta(c)["grade_id"], tree) for c in _cells(nb)
             if is_test_cell(c) and (tree := _parse(cell_source(c))) is not None]
    outside = set()
    for cell in _cells(nb):
        if cell["cell_type"] == "code" and not is_test_cell(cell):
            tree = _parse(cell_source(cell))
            outside |= _loads(tree) if tree is not None else _words(cell_source(cell))
    free = [_loads(tree) - _bound_anywhere(tree) for _, tree in tests]  # what a cell reads of others
    recordable = _recordable([t for _, t in tests], learners)
    trees = [_RecordInputs(recordable).visit(tree) for _, tree in tests]
    if mode == "grading":
        trees = [_Withhold().visit(tree) for tree in trees]
        swept = []
        for n, (tree, learner) in enumerate(zip(trees, learners, strict=True)):
            readers = outside.union(*(f for m, f in enumerate(free) if m != n))
            while True:
                program: list[_Unit] = []
                _statement_units(tree.body, None, learner, program, _fresh_names(tree))
                live = _liveness(program, readers)
                if not _prune_zips(tree, live):
                    break
            swept.append(_Sweep({id(u.node) for u in program if u.removable and not u.live}).visit(tree))
        trees = swept
    hidden = {nbgrader_meta(c)["grade_id"] for c in _cells(nb) if is_test_cell(c) and HIDDEN_TESTS_MARKER in cell_source(c)}
    sources = {}
    for (grade_id, _), tree in zip(tests, trees, strict=True):
        source = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
        if grade_id in hidden:  # the markers stay: the linecache scrub and the feedback look for them
            source = f"{HIDDEN_TESTS_MARKER}\n{source}{END_HIDDEN_TESTS_MARKER}\n"
        sources[grade_id] = source
    return sources


def _words(source: str) -> set[str]:
    """Every identifier-like word of code that does not parse (IPython syntax): all may be read."""
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source))


def _cells(nb) -> list:
    return nb["cells"]


def notebook_sources(solution: Path, mode: str) -> dict[str, str]:
    """graded_sources of a notebook file (read as plain JSON: no nbformat needed)."""
    return graded_sources(json.loads(Path(solution).read_text(encoding="utf-8")), mode)


def lesson_sources_path(root: Path, lesson: str) -> Path:
    """Where a batch keeps a lesson's grading-mode sources: in .grading/, which no kernel sees."""
    return root / ".grading" / "sources" / f"{lesson}.json"


def write_lesson_sources(root: Path, lesson: str) -> Path:
    """The grading-mode sources of every notebook of a lesson, as JSON {notebook stem: {grade_id:
    source}}, for `ExecuteAnnouncingTestCells` (through SOURCES_ENV). Written atomically: shards
    of one course may write it at once."""
    sources = {p.stem: notebook_sources(p, "grading") for p in sorted((root / "solutions" / lesson).glob("*.ipynb"))}
    destination = lesson_sources_path(root, lesson)
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(f".{destination.name}.{os.getpid()}")
    partial.write_text(json.dumps(sources))
    partial.replace(destination)
    return destination


def _read_sources(path: Path, notebook: str) -> dict[str, str]:
    """A notebook's entry of a lesson's sources file ({} when there is none)."""
    try:
        return json.loads(path.read_text()).get(Path(notebook).stem, {})
    except (OSError, ValueError):
        return {}


def lesson_sources_from_env(notebook: str) -> dict[str, str]:
    """The grading-mode sources the batch named in SOURCES_ENV ({} outside `make autograde`,
    where a plain nbgrader run must keep the tests' own expected values)."""
    path = os.environ.get(SOURCES_ENV)
    return _read_sources(Path(path), notebook) if path else {}


def graded_sources_of(root: Path, lesson: str, notebook: str) -> dict[str, str]:
    """The grading-mode sources a batch wrote for a lesson's notebook ({} if none)."""
    return _read_sources(lesson_sources_path(root, lesson), notebook) if lesson else {}
