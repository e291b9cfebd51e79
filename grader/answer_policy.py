"""Names the answers that reach for the grading machinery, before anything runs.

Answers run in the same process as the tests. The verdicts are not trusted there (each check is
recorded and replayed outside the kernel, grader/verdicts.py) and the kernel is sandboxed
(grader/sandbox.py); this policy's job is to NAME an attempt on the grading machinery, so that
it scores 0 and an instructor sees what it tried. It reads each cell the learner wrote or added
as an AST, after IPython's own translation, without running it, and flags:

- the hidden-test markers (they would cut the feedback apart);
- IPython magics and shell escapes, except `%time`, `%timeit`, `%%time`, `%%timeit` and
  `%matplotlib`, whose code is checked with these same rules;
- the grading library: importing `course_lib.grading`, using a name the notebook imports from
  it (`forbid`, the `assert_*` helpers, `begin_checks`, `reports_errors`, `case`: a call from an
  answer would record checks under another cell's name), its recorder's attributes;
- IPython's shell: `get_ipython()`, `ast_transformers`, `input_transformers_*`, `user_ns`,
  `IPython`/`ipykernel` imports (not `IPython.display`), a module's `.kernel`, `.shell`,
  `.events`, and the input history (`In`, `_ih`, `_i3`: it holds the tests' source);
- frames and code objects: `sys._getframe`, `inspect`, `linecache` (it caches the tests'
  source), `f_back`, `f_globals`, `tb_frame`, `gi_frame`, `__code__`, `__globals__`,
  `__builtins__`, `__closure__`, `__subclasses__`, `__self__`, `__traceback__`, a module's
  `__dict__`, `gc.get_objects` and `get_referrers`;
- torch's dispatch internals: `torch.ops`, `torch.library`, `torch.overrides`, `torch._C` and
  every private name of a module, `TorchFunctionMode`, `TorchDispatchMode`, `_python_dispatch`,
  `DisableTorchFunction`, defining `__torch_function__` or `__torch_dispatch__`;
- the import system and hooks: `sys.modules`, `sys.meta_path`, `importlib`, `__import__`,
  `builtins`, `sys.settrace`, `setprofile`, `addaudithook`, `sys.monitoring`;
- code from strings: `eval`, `exec`, `compile`, `pickle`, `marshal`, `runpy`,
  `typing.get_type_hints` (it evaluates annotation strings);
- the recorder's folder (`os.environ`, `os.getenv`: the grader names it in the environment),
  processes and the network (`subprocess`, `os.system`, `os.kill`, `signal`, `socket`,
  `ctypes`, `threading`, ...), the gradebook (`sqlite3`), and every private module (`_io`);
  files are allowed (answers save checkpoints), but a string naming the machinery's files
  (`"solutions/"`, `"gradebook"`, `"checks.jsonl"`, `"COURSE_GRADING..."`) is flagged;
- the notebook's namespace: `globals()`, `locals()`, `vars()` and `vars(module)`;
- monkeypatching: assigning or deleting an attribute of a module or of a name imported or
  defined by the notebook (`torch.isclose = ...`, `F.softmax = ...`, `m = torch; m.isclose = ...`),
  and assigning, on anything but `self`, an attribute named like a function the grading
  helpers call (`def f(m): m.isclose = ...`);
- rebinding a name that the notebook's own cells import or define (`forbid = ...`,
  `def assert_tensor_close(...)`), or declaring one `global`;
- `getattr`, `setattr`, `delattr` and `hasattr` are judged like the attribute they name: a
  constant name, or one folded from constants (`"__glo" + "bals__"`), meets the rules above; a
  name built at run time (`chr`, `join`, `format`, an f-string or `+` with a variable, or a
  variable bound to one) is flagged; `setattr`/`delattr` on a module or an imported name is
  flagged whatever the name. A plain variable name is allowed: `getattr(nn, name)` is how
  careful code picks an activation by name, and the object and the name both come from the
  caller;
- a string, constant or folded from constants, that names the machinery (`"__globals__"`,
  `"f_back"`, `"course_lib.grading"`), whatever it is passed to.

What careful Python does is allowed: type hints (`typing`, `from __future__ import
annotations`), `collections.abc`, `numbers`, `operator`, `time`, `warnings`, `sys` (but its
doors above), `torch.jit.script`, `import torch.linalg as LA`, private attributes of the
answer's own objects (`self._dim`), `self.modules()`, `type(x).__name__`, a parameter named
`input`, a variable named `vars`, `if __name__ == "__main__":`, and attributes assigned on
objects the answer received or built (`cache.length = n`).

What it does not catch: an in-process policy cannot stop dynamic Python. Objects reached
through calls (`(lambda: torch)().softmax = ...`), getattr with a variable name and object both
passed in by a caller, files written or read under names it does not know (`open`,
`np.fromfile`, `torch.load`), memory and time spent, and anything else this list does not name
still run. The replay of recorded checks outside the
kernel and the sandbox are what hold; this policy names what it recognises for a reviewer.
"""

from __future__ import annotations

import ast
import re
import symtable
from collections.abc import Iterable
from dataclasses import dataclass

from course_lib.grading_env import GRADING_ENV, RECORD_FILE
from grader.cells import MARKER_WORDS, is_answer_cell, nbgrader_meta

GRADING = "reaches the grading library"
IPYTHON = "reaches the IPython shell"
FRAMES = "reaches frames or code objects"
DISPATCH = "reaches torch's dispatch internals"
IMPORTS = "reaches the import system"
HOOKS = "installs a trace or audit hook"
STRING_CODE = "runs code from a string"
SYSTEM = "reaches processes, the network or the gradebook"
NAMESPACE = "reaches the notebook's namespace"
PRIVATE = "private name of a module"
MONKEYPATCH = "monkeypatches a module or an imported name"
BUILT_NAME = "attribute name built at run time"
STRING_NAME = "names the grading machinery in a string"
REBINDS = "rebinds a name the notebook's own cells define"
GLOBAL = "global declaration of a name the tests use"
MARKER = "grading marker in an answer"
MAGIC = "IPython magic or shell command"
NOT_PYTHON = "not Python"

# Dotted paths (modules, or attributes reached from a module by name) and what reaching them is.
# A path matches itself and everything below it.
FORBIDDEN_PATHS: dict[str, str] = {
    "course_lib.grading": GRADING,
    **dict.fromkeys(("IPython", "ipykernel", "jupyter_client", "nbclient", "nbformat", "nbgrader",
                     "traitlets"), IPYTHON),
    **dict.fromkeys(("inspect", "linecache", "sys._getframe", "sys._current_frames", "gc.get_objects",
                     "gc.get_referrers", "gc.get_referents", "traceback.walk_stack", "traceback.walk_tb"),
                    FRAMES),
    **dict.fromkeys(("torch.ops", "torch.library", "torch.overrides", "torch.utils._python_dispatch",
                     "torch._C", "torch._ops"), DISPATCH),
    **dict.fromkeys(("sys.modules", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache",
                     "importlib", "builtins", "pkgutil", "zipimport", "site"), IMPORTS),
    **dict.fromkeys(("sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.monitoring",
                     "sys.excepthook", "sys.displayhook", "sys.breakpointhook", "threading.settrace",
                     "threading.setprofile", "faulthandler", "atexit"), HOOKS),
    **dict.fromkeys(("pickle", "marshal", "shelve", "dill", "runpy", "code", "codeop",
                     "typing.get_type_hints", "typing.ForwardRef"), STRING_CODE),
    **dict.fromkeys(("os.environ", "os.environb", "os.getenv", "os.putenv", "os.unsetenv"), GRADING),
    **dict.fromkeys(("sqlite3", "dbm", "subprocess", "signal", "ctypes", "cffi", "mmap", "multiprocessing",
                     "threading", "_thread", "concurrent", "pty", "fcntl", "resource", "socket", "ssl",
                     "http", "urllib", "requests", "numpy.ctypeslib", "os.system", "os.popen", "os.fork",
                     "os.forkpty", "os.kill", "os.killpg", "os.setsid", "os.execv", "os.execve", "os.execl",
                     "os.execlp", "os.execvp", "os.execvpe", "os.execle", "os.execlpe", "os.spawnl",
                     "os.spawnv", "os.spawnlp", "os.spawnvp", "os.posix_spawn", "os.posix_spawnp"), SYSTEM),
}
# Attributes that lead to the machinery from any object, whatever the answer calls it.
ANY_ROOT_ATTRIBUTES: dict[str, str] = {
    **dict.fromkeys(("begin_checks", "reports_errors", "assert_tensor_close", "assert_shape",
                     "assert_equal", "assert_sequence_equal", "assert_number_close", "assert_true",
                     "assert_raises", "forbid", "_recorder", "_record", "_Recorder", "RECORD_ENV",
                     "_WITHHOLD", "WITHHOLD_ENV", "SEED_ENV", "hidden_seed",
                     "read_records", "consolidate_records", "replay_check", "announcement"), GRADING),
    **dict.fromkeys(("ast_transformers", "input_transformers_cleanup", "input_transformers_post",
                     "input_transformer_manager", "user_ns", "user_global_ns", "user_ns_hidden",
                     "run_line_magic", "run_cell_magic"), IPYTHON),
    **dict.fromkeys(("f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "tb_frame",
                     "tb_next", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code",
                     "co_code", "_getframe", "_current_frames", "get_referrers", "get_objects",
                     "__code__", "__globals__", "__closure__", "__subclasses__", "__self__",
                     "__traceback__", "__kwdefaults__", "__defaults__", "__wrapped__",
                     "__getattribute__"), FRAMES),
    **dict.fromkeys(("TorchFunctionMode", "TorchDispatchMode", "_python_dispatch", "DisableTorchFunction",
                     "DisableTorchFunctionSubclass", "__torch_function__", "__torch_dispatch__",
                     "_C"), DISPATCH),
    **dict.fromkeys(("__builtins__", "__import__", "__loader__", "__spec__", "meta_path"), IMPORTS),
    **dict.fromkeys(("settrace", "setprofile", "addaudithook"), HOOKS),
    **dict.fromkeys(("get_type_hints", "ForwardRef"), STRING_CODE),
}
# Attributes that lead to the machinery when read from a module or the notebook's own names.
MODULE_ATTRIBUTES: dict[str, str] = {
    "kernel": IPYTHON, "shell": IPYTHON, "events": IPYTHON, "__dict__": NAMESPACE,
    "modules": IMPORTS, "ops": DISPATCH, "library": DISPATCH, "overrides": DISPATCH,
    "grading": GRADING,
}
# Built-in functions and what they reach (unless the answer binds the name itself).
BUILTINS: dict[str, str] = {
    "eval": STRING_CODE, "exec": STRING_CODE, "compile": STRING_CODE, "__import__": IMPORTS,
    "__builtins__": IMPORTS, "__loader__": IMPORTS, "__spec__": IMPORTS,
    "globals": NAMESPACE, "locals": NAMESPACE, "get_ipython": IPYTHON,
}
# IPython's input and output history: In, Out, _ih, _oh, _dh, _i, _ii, _iii, _i3, _3.
HISTORY = re.compile(r"In|Out|_ih|_oh|_dh|_i{1,3}|_i\d+|_\d+")
# Parts of the grading machinery's file names: a string holding one names them (`open(...)`
# itself is allowed: answers save checkpoints and read data).
MACHINERY_FILES = ("solutions/", "solutions\\", "gradebook", "submitted/", "autograded/", ".grading",
                   "nbgrader", "course_lib/grading", RECORD_FILE, GRADING_ENV)  # GRADING_ENV: every COURSE_GRADING_*
MACHINERY_FOLDERS = frozenset({"solutions", "submitted", "autograded"})
# What the grading helpers call on tensors and torch: an answer assigning these on anything but
# `self` is patching them, whatever the object is called.
HELPER_DEPENDENCIES = frozenset({"isclose", "allclose", "equal", "isnan", "testing", "assert_close",
                                 "nan_to_num", "nonzero"})
# Strings that name the machinery, whatever they are passed to (too common words left out).
MACHINERY_STRINGS = (frozenset(ANY_ROOT_ATTRIBUTES) - {"forbid", "_C", "announcement"}) | {"__dict__"}
ALLOWED_MAGICS = frozenset({"time", "timeit", "matplotlib"})
ATTRIBUTE_FUNCTIONS = ("getattr", "setattr", "delattr", "hasattr")
# Turning something into a name at run time: what obfuscation looks like.
STRING_BUILDERS = frozenset({"chr", "join", "format", "decode", "bytes", "str", "fromhex", "b64decode",
                             "replace", "translate", "reversed", "swapcase"})


@dataclass(frozen=True)
class Violation:
    line: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.rule} ({self.detail})"


def _forbidden_path(dotted: str) -> str | None:
    """The rule a dotted path (module or module attribute) breaks, or None."""
    if dotted == "IPython.display" or dotted.startswith("IPython.display."):
        return None  # display(), HTML(): showing things is not the shell
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        rule = FORBIDDEN_PATHS.get(".".join(parts[:i]))
        if rule:
            return rule
    if any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts):
        return PRIVATE if parts[0] != "torch" else DISPATCH
    if parts[-1] in ANY_ROOT_ATTRIBUTES:
        return ANY_ROOT_ATTRIBUTES[parts[-1]]
    if len(parts) > 1 and parts[-1] in MODULE_ATTRIBUTES:
        return MODULE_ATTRIBUTES[parts[-1]]
    return None


def _bound_names(target: ast.AST) -> Iterable[ast.Name]:
    if isinstance(target, ast.Name):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _bound_names(element)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)


def _chain(node: ast.AST) -> tuple[ast.AST, list[str]]:
    """`a.b.c` -> (Name a, ["b", "c"]): the root of an attribute chain and the names after it."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return node, names[::-1]


def _fold(node: ast.AST) -> str | None:
    """The string an expression of constants makes (`"__glo" + "bals__"`), or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _fold(node.left), _fold(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        text = _fold(node.left)
        if text is not None and isinstance(node.right, ast.Constant) and isinstance(node.right.value, int):
            return text * min(node.right.value, 100)
    if isinstance(node, ast.JoinedStr):
        parts = [_fold(v) for v in node.values]
        return "".join(parts) if all(p is not None for p in parts) else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
            and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple))):
        sep, parts = _fold(node.func.value), [_fold(e) for e in node.args[0].elts]
        return sep.join(parts) if sep is not None and all(p is not None for p in parts) else None
    return None


def _builds_a_string(node: ast.AST) -> bool:
    """An expression that makes a string at run time from parts the policy cannot read."""
    if isinstance(node, (ast.BinOp, ast.JoinedStr)):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in STRING_BUILDERS
    if isinstance(node, ast.Subscript):  # "__xglobals__"[..], names[::-1]
        return _builds_a_string(node.value) or isinstance(node.slice, ast.Slice)
    return False


class _Checker:
    def __init__(self, tree: ast.Module, source: str, protected: dict[str, str | None]):
        self.tree, self.protected = tree, protected
        self.violations: list[Violation] = []
        self.aliases = self._aliases()
        self.bound_here = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.bound_here |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments)
                            for a in (*n.posonlyargs, *n.args, *n.kwonlyargs, n.vararg, n.kwarg) if a}
        self.bound_here |= {n.name for n in ast.walk(tree)
                            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        self.string_values: dict[str, list[ast.AST]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in _bound_names(target):
                        self.string_values.setdefault(name.id, []).append(node.value)
        self.global_refs = _global_references(source)
        self.own_setattrs = {id(n.func) for n in ast.walk(tree) if _sets_its_own_attribute(n)}

    def flag(self, node: ast.AST | int, rule: str, detail: str) -> None:
        line = node if isinstance(node, int) else getattr(node, "lineno", 0)
        self.violations.append(Violation(line, rule, detail))

    def _aliases(self) -> dict[str, str]:
        """Names that stand for a module, or for something imported or defined by the notebook,
        mapped to its dotted path: imports, the notebook's names, and plain aliases of them
        (`m = torch`, `f = torch.nn.functional`), wherever they are bound."""
        aliases = {name: dotted or f"<notebook>.{name}" for name, dotted in self.protected.items()}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                for alias in node.names:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        self.aliases, changed = aliases, True
        while changed:
            changed = False
            for node in ast.walk(self.tree):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    values, targets = [node.value], node.targets if isinstance(node, ast.Assign) else [node.target]
                elif isinstance(node, (ast.For, ast.AsyncFor)):
                    values = node.iter.elts if isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)) else []
                    targets = [node.target]
                else:
                    continue
                for value in values:
                    dotted = self.dotted(value)
                    if dotted is None:
                        continue
                    for target in targets:
                        for name in _bound_names(target):
                            if name.id not in aliases:
                                aliases[name.id], changed = dotted, True
        return aliases

    def dotted(self, node: ast.AST) -> str | None:
        root, names = _chain(node)
        if isinstance(root, ast.Name) and root.id in self.aliases:
            return ".".join([self.aliases[root.id], *names])
        return None

    def attribute_rule(self, owner: ast.AST, attr: str, node: ast.AST | None = None) -> str | None:
        """The rule that reading `owner.attr` (the node `node`) breaks, or None."""
        dotted = self.dotted(owner)
        rule = _forbidden_path(f"{dotted}.{attr}") if dotted else None
        if rule is None and attr in ANY_ROOT_ATTRIBUTES:
            rule = ANY_ROOT_ATTRIBUTES[attr]
        if rule is None and attr in ("__setattr__", "__delattr__") and id(node) not in self.own_setattrs:
            rule = MONKEYPATCH  # object.__setattr__(torch, ...)
        return rule

    def store_rule(self, owner: ast.AST, attr: str) -> str | None:
        """The rule that assigning or deleting `owner.attr` breaks, or None."""
        root, _ = _chain(owner)
        on_self = isinstance(root, ast.Name) and root.id in ("self", "cls")
        if self.dotted(owner) is not None or (attr in HELPER_DEPENDENCIES and not on_self):
            return MONKEYPATCH
        return None

    def check_chain(self, node: ast.Attribute) -> None:
        """An attribute chain `a.b.c`, flagged once, at the first link that breaks a rule."""
        links = []
        while isinstance(node, ast.Attribute):
            links.append(node)
            node = node.value
        for link in reversed(links):
            rule = self.attribute_rule(link.value, link.attr, link)
            if rule:
                self.flag(link, rule, ast.unparse(link))
                break
        outer = links[0]
        if isinstance(outer.ctx, (ast.Store, ast.Del)):
            rule = self.store_rule(outer.value, outer.attr)
            if rule:
                self.flag(outer, rule, ast.unparse(outer))

    def check_named(self, call: ast.Call, owner: ast.AST, attr: str, storing: bool) -> None:
        for rule in (self.attribute_rule(owner, attr), self.store_rule(owner, attr) if storing else None):
            if rule:
                self.flag(call, rule, ast.unparse(call))

    def check_attribute_call(self, node: ast.Call) -> None:
        """getattr(obj, name), setattr(obj, name, value), delattr(obj, name), hasattr(obj, name)."""
        function = node.func.id
        if len(node.args) < 2:
            return
        owner, name = node.args[0], node.args[1]
        storing = function in ("setattr", "delattr")
        text = _fold(name)
        if text is None and isinstance(name, ast.Name):
            folded = [_fold(v) for v in self.string_values.get(name.id, [])]
            if any(_builds_a_string(v) and f is None for v, f in zip(self.string_values.get(name.id, []), folded, strict=True)):
                self.flag(node, BUILT_NAME, ast.unparse(node))
                return
            for f in folded:
                if f is not None:
                    self.check_named(node, owner, f, storing)
        if text is not None:
            self.check_named(node, owner, text, storing)
        elif _builds_a_string(name):
            self.flag(node, BUILT_NAME, ast.unparse(node))
        elif storing and self.dotted(owner) is not None:
            self.flag(node, MONKEYPATCH, ast.unparse(node))

    def check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            paths = [alias.name for alias in node.names]
        elif node.level:
            paths = ["." * node.level + (node.module or "")]
        else:
            paths = [f"{node.module}.{alias.name}" for alias in node.names]
            if node.module != "__future__":
                paths.append(node.module)
        for path in paths:
            rule = SYSTEM if path.startswith(".") else None  # a package beside the notebook
            if not path.startswith(("__future__", ".")):
                rule = _forbidden_path(path)
            if rule:
                self.flag(node, rule, f"import {path}")
                return

    def check_strings(self) -> None:
        seen: set[int] = set()
        for node in ast.walk(self.tree):
            if not isinstance(node, (ast.Constant, ast.BinOp, ast.JoinedStr, ast.Call)) or id(node) in seen:
                continue
            text = _fold(node)
            if text is None:
                continue
            seen.update(id(n) for n in ast.walk(node))
            stripped = text.strip()
            if (stripped in MACHINERY_STRINGS or stripped.startswith("course_lib.grading")
                    or stripped.strip("./") in MACHINERY_FOLDERS or any(f in text for f in MACHINERY_FILES)):
                self.flag(node, STRING_NAME, repr(stripped[:80]))
        for node in ast.walk(self.tree):  # the constant parts of f-strings
            if isinstance(node, ast.JoinedStr) and id(node) not in seen:
                for part in node.values:
                    if isinstance(part, ast.Constant) and any(f in str(part.value) for f in MACHINERY_FILES):
                        self.flag(node, STRING_NAME, repr(str(part.value)[:80]))

    def run(self) -> list[Violation]:
        inner_links = {id(n.value) for n in ast.walk(self.tree) if isinstance(n, ast.Attribute)}
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.check_import(node)
            elif isinstance(node, ast.Attribute) and id(node) not in inner_links:
                self.check_chain(node)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in ATTRIBUTE_FUNCTIONS and node.func.id not in self.bound_here:
                    self.check_attribute_call(node)
                elif node.func.id == "vars" and "vars" not in self.bound_here:
                    if not node.args or self.dotted(node.args[0]) is not None:
                        self.flag(node, NAMESPACE, ast.unparse(node))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if node.id in BUILTINS and node.id not in self.bound_here:
                    self.flag(node, BUILTINS[node.id], node.id)
                elif HISTORY.fullmatch(node.id) and node.id not in self.bound_here:
                    self.flag(node, IPYTHON, f"{node.id} (the input history holds the tests' source)")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name in ("__torch_function__", "__torch_dispatch__"):
                    self.flag(node, DISPATCH, f"defines {node.name}")
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                for name in node.names:
                    if name in self.protected:
                        self.flag(node, GLOBAL, name)
        for name, line in self.global_refs:  # the notebook's imports of the machinery (`forbid`)
            rule = _forbidden_path(self.protected.get(name) or "")
            if rule:
                self.flag(line, rule, name)
        self.check_strings()
        for statement in _module_level_statements(self.tree.body):
            same_import = {name for name, dotted in _import_targets(statement)
                           if name in self.protected and self.protected[name] == dotted}
            for name, line in _module_level_bindings(statement):
                if name in self.protected and name not in same_import:
                    self.flag(line, REBINDS, name)
        return self.violations


def _sets_its_own_attribute(node: ast.AST) -> bool:
    """`super().__setattr__(name, value)`, `object.__setattr__(self, name, value)`: how a class
    (an nn.Module, a frozen dataclass) sets its own attributes."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("__setattr__", "__delattr__")):
        return False
    owner = node.func.value
    if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
        return True
    return (isinstance(owner, ast.Name) and owner.id in ("object", "self", "cls") and bool(node.args)
            and isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))


def _global_references(source: str) -> list[tuple[str, int]]:
    """(name, line) for each name a scope of the cell reads from the notebook's namespace."""
    try:
        top = symtable.symtable(source, "<answer>", "exec")
    except SyntaxError:
        return []
    names: set[str] = set()

    def visit(table: symtable.SymbolTable) -> None:
        for symbol in table.get_symbols():
            module_scope = table.get_type() == "module"
            if symbol.is_referenced() and (module_scope or symbol.is_global()):
                names.add(symbol.get_name())
        for child in table.get_children():
            visit(child)

    visit(top)
    lines = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load):
            lines[node.id] = min(lines.get(node.id, node.lineno), node.lineno)
    return sorted(lines.items())


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
    elif isinstance(statement, (ast.Assign, ast.Delete)):
        for target in statement.targets:
            for name in _bound_names(target):
                yield name.id, statement.lineno
    elif isinstance(statement, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
        for name in _bound_names(statement.target):
            yield name.id, statement.lineno
    elif isinstance(statement, (ast.With, ast.AsyncWith)):
        for item in statement.items:
            if item.optional_vars is not None:
                for name in _bound_names(item.optional_vars):
                    yield name.id, statement.lineno
    if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        for node in _walk_this_scope(statement):  # `(forbid := ...)` binds in the notebook too
            if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
                yield node.target.id, statement.lineno


def _walk_this_scope(node: ast.AST) -> Iterable[ast.AST]:
    """The nodes of a statement's own expressions: not nested statements, defs or lambdas."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.stmt, ast.Lambda)):
            continue
        yield child
        yield from _walk_this_scope(child)


def _magic_calls(tree: ast.AST) -> tuple[list[ast.Call], list[ast.Call]]:
    """IPython's translation of magics: (allowed `run_line_magic`/`run_cell_magic` calls on
    `get_ipython()` with constant arguments, every other `get_ipython()` call)."""
    allowed, other = [], []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if not (isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "get_ipython"):
            continue
        constant = (all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)
                    and not node.keywords and owner.args == [] and not owner.keywords)
        if (node.func.attr in ("run_line_magic", "run_cell_magic") and constant
                and len(node.args) == (2 if node.func.attr == "run_line_magic" else 3)
                and node.args[0].value in ALLOWED_MAGICS):
            allowed.append(node)
        else:
            other.append(node)
    return allowed, other


def _magic_code(call: ast.Call) -> list[str]:
    """The Python an allowed magic runs: its statement (after timeit's options) and its cell."""
    name, line = call.args[0].value, call.args[1].value
    if name == "matplotlib":
        return [] if re.fullmatch(r"\s*[\w.:-]*\s*", line) else [line]
    if name == "timeit":  # -n N -r R -p P -t -c -q -o
        line = line[re.match(r"\s*((-[nrp]\s*\S+|-[tcqo])\s+)*", line + " ").end():]
    cell = [call.args[2].value] if len(call.args) == 3 else []
    return [line.strip(), *cell]


def check_answer(source: str, protected: dict[str, str | None] | Iterable[str] = ()) -> list[Violation]:
    """Every attempt on the grading machinery in one cell; [] when the cell may run.

    `protected` holds the names the notebook's own cells import or define (see
    `notebook_definitions`); a cell may import such a name again from the same place, but not
    bind it to anything else.
    """
    protected = dict(protected) if isinstance(protected, dict) else dict.fromkeys(protected)
    violations = [Violation(0, MARKER, repr(marker)) for marker in MARKER_WORDS if marker in source]
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        translated = TransformerManager().transform_cell(source)
    except Exception as error:  # IPython refuses what it cannot translate
        return violations + [Violation(0, NOT_PYTHON, f"{type(error).__name__}: {error}")]
    try:
        tree = ast.parse(translated)
    except SyntaxError as error:
        return violations + [Violation(error.lineno or 0, NOT_PYTHON, error.msg or "syntax error")]

    allowed, other = _magic_calls(tree)
    for call in other:
        violations.append(Violation(call.lineno, MAGIC, ast.unparse(call)))
    for call in allowed:
        for code in _magic_code(call):
            for inner in check_answer(code, protected):
                violations.append(Violation(call.lineno, inner.rule, f"in %{call.args[0].value}: {inner.detail}"))
        call.func, call.args = ast.Name("print", ast.Load()), []  # IPython's call, checked above
    checker = _Checker(tree, ast.unparse(tree) if allowed else translated, protected)
    violations += [v for v in checker.run()  # get_ipython() of a magic is named as the magic
                   if not (other and v.rule == IPYTHON and v.detail == "get_ipython")]
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


def policy_violations(nb, protected: dict[str, str | None],
                      released_sources: Iterable[str] = ()) -> list[tuple[int, str, list[Violation]]]:
    """(cell index, label, violations) for each code cell the learner wrote or added that breaks
    the policy: answer cells (labelled by grade_id) and code cells without nbgrader metadata
    whose source is not one of the release's (`released_sources`: the instructor's own cells,
    as released, are not the learner's; one the learner edited is, "added or edited cell N").
    The instructor's graded and locked cells are not checked: nbgrader restores them."""
    instructor = {source.strip() for source in released_sources}
    findings = []
    for index, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if is_answer_cell(cell):
            label = nbgrader_meta(cell).get("grade_id", f"answer cell {index}")
        elif not nbgrader_meta(cell) and source.strip() not in instructor:
            label = f"added or edited cell {index}"
        else:
            continue
        violations = check_answer(source, protected)
        if violations:
            findings.append((index, label, violations))
    return findings


def withhold(nb, findings: list[tuple[int, str, list[Violation]]]) -> None:
    """Replace each offending cell's source (answer or added) by `withheld_source`, in place."""
    for index, label, violations in findings:
        if violations:
            nb.cells[index]["source"] = withheld_source(label, violations)


def withheld_source(grade_id: str, violations: list[Violation]) -> str:
    """What replaces a cell that breaks the policy: it scores 0 and says why."""
    reasons = "; ".join(str(v) for v in violations[:5])
    message = (f"answer {grade_id} withheld by the grading policy: {reasons}. "
               "An instructor reviews the original by hand.")
    return f"raise RuntimeError({message!r})"
