"""Submissions for the grading round trip: honest, untouched, and ones that cheat or break."""

from __future__ import annotations

import copy
import textwrap

import nbformat
import torch

from grader.cells import is_answer_cell, is_hidden_test_cell, is_test_cell
from grader.cells import nbgrader_meta as meta
from tests.grading.wrong_answers import FORBIDDEN_OVERRIDES, RIGHT_VARIANTS, WRONG_ANSWERS  # noqa: F401

# Answers that call the reference a lesson asks learners to write. Visible tests do not
# forbid it, hidden tests do: such a submission may earn the visible points, never the hidden ones.
FORBIDDEN_ANSWERS: dict[str, dict[str, str]] = {
    "00_setup": {
        "softmax_answer": """
            def stable_softmax(x, dim=-1):
                return torch.softmax(x, dim=dim)
        """,
        "cross_entropy_answer": """
            def cross_entropy(logits, targets):
                return torch.nn.functional.cross_entropy(logits, targets)
        """,
    },
    "01_tokenization": {
        "get_stats_answer": """
            from course_lib.tokenization import pair_counts
            def get_stats(ids, counts=None):
                return pair_counts(ids, counts)
        """,
        "merge_answer": """
            from course_lib.tokenization import merge_pair
            def merge(ids, pair, idx):
                return merge_pair(ids, pair, idx)
        """,
        "train_bpe_answer": """
            def train_bpe(text, vocab_size, pattern=GPT4_SPLIT_PATTERN):
                return naive_train_merges(text, vocab_size, pattern)
        """,
        "bpe_encode_answer": """
            def bpe_encode(text, merges, pattern=GPT4_SPLIT_PATTERN):
                tok = BPETokenizer(pattern)
                tok.merges = merges
                return tok.encode(text)
        """,
        "wordpiece_answer": """
            def best_wordpiece_pair(splits):
                words = {s[0] + "".join(p[2:] for p in s[1:]): n for s, n in splits.items()}
                scores = wordpiece_pair_scores(words)
                best = max(scores, key=scores.get)
                return best, scores[best]
        """,
        "viterbi_answer": """
            def viterbi(word, log_probs):
                return UnigramTokenizer(log_probs).viterbi(word)
        """,
        "fertility_answer": """
            def tokens_per_word(encode, text):
                return fertility(encode, text)
        """,
    },
    "02_embeddings": {
        "one_hot_answer": """
            def one_hot_embed(ids, E):
                return ref.one_hot_embed(ids, E)
        """,
        "token_position_answer": """
            from course_lib.embeddings import TokenAndPositionEmbedding
            class TokenPositionEmbedding(TokenAndPositionEmbedding):
                pass
        """,
        "sinusoidal_answer": """
            def sinusoidal_pe(seq_len, n_embd, base=10000.0):
                return ref.sinusoidal_positional_encoding(seq_len, n_embd, base)
        """,
        "cosine_answer": """
            def cosine_similarity(a, b, dim=-1, eps=1e-8):
                return ref.cosine_similarity(a, b, dim=dim, eps=eps)
        """,
    },
    "03_attention": {
        "scores_answer": """
            def attention_scores(q, k):
                # the reference's weights against the keys plus one key of score 0 give back the scores
                keys = torch.cat([k.double(), torch.zeros_like(k[..., :1, :]).double()], dim=-2)
                _, w = ref.scaled_dot_product_attention(q.double(), keys, keys)
                return (w[..., :-1] / w[..., -1:]).log().to(q.dtype)
        """,
        "mask_answer": """
            def apply_mask(scores, mask):
                # scores as queries against identity keys (scale 1), plus one key of score 0
                Tk = scores.shape[-1]
                keys = torch.cat([torch.eye(Tk), torch.zeros(1, Tk)]).double()
                extra = torch.ones(*mask.shape[:-1], 1, dtype=mask.dtype)
                if mask.dtype != torch.bool:
                    extra = torch.zeros_like(extra)
                _, w = ref.scaled_dot_product_attention(scores.double(), keys, keys, torch.cat([mask, extra], dim=-1), scale=1.0)
                return (w[..., :-1] / w[..., -1:]).log().to(scores.dtype)
        """,
        "softmax_answer": """
            def stable_softmax(x, dim=-1):
                return ref.stable_softmax(x, dim=dim)
        """,
        "attention_answer": """
            def attention(q, k, v, mask=None, is_causal=False):
                return ref.scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal)
        """,
        "heads_answer": """
            def split_heads(x, n_head):
                return ref.split_heads(x, n_head)

            def merge_heads(x):
                return ref.merge_heads(x)
        """,
    },
    "09_decoding": {
        "greedy_answer": """
            def greedy_decode(model, idx, max_new_tokens):
                return ref.greedy_search(model, idx, max_new_tokens, use_cache=False)
        """,
        "beam_answer": """
            def beam_decode(model, idx, max_new_tokens, beam_width):
                tokens = ref.beam_search(model, idx, max_new_tokens, beam_width, use_cache=False)
                with torch.no_grad():  # model.forward, not model(...): the call counter must not see it
                    log_probs = torch.log_softmax(model.forward(tokens)[0].double(), dim=-1)
                start = idx.shape[1]
                picked = log_probs[:, start - 1:-1].gather(-1, tokens[:, start:, None])[..., 0]
                return tokens, picked.sum().item()
        """,
        "top_k_answer": """
            def keep_top_k(logits, k):
                return top_k_filter(logits, k)
        """,
        "top_p_answer": """
            def keep_top_p(logits, p):
                return top_p_filter(logits, p)
        """,
        "sample_answer": """
            def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
                probs = ref.filter_logits(logits, temperature, top_k, top_p).double().softmax(-1)
                u = torch.rand(logits.shape[0], generator=generator, dtype=torch.float64)
                return (probs.cumsum(-1) <= u[:, None]).sum(-1)
        """,
    },
    "11_flash_attention": {
        "merge_answer": """
            def merge_partials(m1, l1, o1, m2, l2, o2):
                return flash_ref.merge_softmax(m1, l1, o1, m2, l2, o2)
        """,
        "tiled_answer": """
            def tiled_attention(q, k, v, block_size=64, causal=False):
                return flash_ref.flash_attention_forward(q, k, v, causal=causal, block_size=block_size)
        """,
        "score_grad_answer": """
            def tile_score_grad(p, dp, out, grad_out):
                return flash_ref.softmax_grad_tile(p, dp, (grad_out * out).sum(-1, keepdim=True))
        """,
        "triton_answer": """
            tile_step = flash_triton.online_softmax_step
        """,
    },
}
# Lessons 04, 05, 06, 07, 08 and 10 keep theirs beside their wrong answers (FORBIDDEN in
# wrong_answers/lesson_NN.py).
FORBIDDEN_ANSWERS.update(FORBIDDEN_OVERRIDES)


# Hostile answers (issue 14): each targets lesson 00's first answer cell, attacks the grading
# machinery, and defines a wrong stable_softmax that only the attack could make pass. The answer
# policy (grader/answer_policy.py) must withhold every one: each scores 0 and is flagged.
def _code(*parts: str) -> str:
    return "\n".join(textwrap.dedent(part).strip() for part in parts)


_WRONG = """
    def stable_softmax(x, dim=-1):
        return x
"""
HOSTILE_ANSWERS: dict[str, str] = {
    "ast-transformer": _code("""
        import ast
        class DropAsserts(ast.NodeTransformer):
            def visit_Assert(self, node):
                return None
        get_ipython().ast_transformers.append(DropAsserts())
    """, _WRONG),
    "patches-isclose": _code("""
        torch.isclose = lambda a, b, **kwargs: torch.ones_like(a, dtype=torch.bool)
    """, _WRONG),
    "helper-via-globals": _code(_WRONG, """
        stable_softmax.__globals__["assert_tensor_close"] = lambda *args, **kwargs: None
    """),
    "obfuscated-import": _code("""
        importlib = getattr(__builtins__, "__im" + "port__")("importlib")
        grading = importlib.import_module("course_lib.grad" + "ing")
        grading.assert_tensor_close.__code__ = (lambda *args, **kwargs: None).__code__
    """, _WRONG),
    "null-forbid": _code("""
        import contextlib
        forbid = lambda *args, **kwargs: contextlib.nullcontext()
        def stable_softmax(x, dim=-1):
            return torch.softmax(x, dim=dim)
    """),
    "torch-c-internals": _code("""
        def stable_softmax(x, dim=-1):
            with torch._C.DisableTorchFunction():
                return torch._C._VariableFunctions.softmax(x, dim)
    """),
    "hidden-test-markers": _code("""
        ### BEGIN HIDDEN TESTS
        ### BEGIN HIDDEN TESTS
        def stable_softmax(x, dim=-1):
            return torch.softmax(x, dim=dim)
    """),
    "reads-solutions": _code("""
        print(open("solutions/00_setup/00_setup.ipynb").read()[:5000])
    """, _WRONG),
    "writes-gradebook": _code("""
        import sqlite3
        sqlite3.connect("gradebook.db").execute("update grade set manual_score = 100")
    """, _WRONG),
}


# Attacks on the machine and on the batch (issue 14). They need imports the answer policy
# refuses, so they are graded with the policy off: what stops them is the sandbox (a PID
# namespace, memory and output limits) and the grader's own robustness.
SANDBOX_ATTACKS: dict[str, str] = {
    "kills-every-process": _code(_WRONG, """
        import os, signal
        for pid in range(1, 4 * 2**15):
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)  # the grader, nbgrader, other kernels: any it can see
                except (ProcessLookupError, PermissionError):
                    pass
    """),
    "stdout-holding-daemon": _code(_WRONG, """
        import os, time
        if os.fork() == 0:  # a double-forked daemon in its own session, holding stdout open
            os.setsid()
            if os.fork() == 0:
                time.sleep(3600)
            os._exit(0)
    """),
    "allocates-18-gb": _code(_WRONG, """
        hoard = torch.empty(18 * 2**30, dtype=torch.uint8)
        hoard.fill_(1)
    """),
    "prints-500-mb": _code(_WRONG, """
        print("x" * 500_000_000)
    """),
}


# Attacks on the verdict's records, the instructor's browser, the limits and the hidden tests'
# secrecy (issue 27), graded with the answer policy off on the first lesson: each is
# {name: (answer sources by grade_id, what its honest part earns: "softmax", "all" or 0)}.
_RIGHT_SOFTMAX = """
    def stable_softmax(x, dim=-1):
        shifted = x - x.amax(dim=dim, keepdim=True)
        return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)
"""
_RIGHT_CROSS_ENTROPY = """
    def cross_entropy(logits, targets):
        m = logits.amax(dim=-1, keepdim=True)
        log_z = m.squeeze(-1) + (logits - m).exp().sum(dim=-1).log()
        return (log_z - logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)).mean()
"""
XSS = ('<script>fetch("/api/contents/pwned-by-xss.txt", {method: "PUT", body: JSON.stringify({type: "file", '
       'format: "text", content: "x"})})</script><img src="x" onerror="fetch(\'/api/contents/pwned-by-img.txt\', '
       '{method: \'PUT\'})">')
# Markdown that regular expressions over the source misread and the renderer makes live (issue 39),
# and an image size that a template writes unquoted into the page.
_PUT = "fetch('/api/contents/pwned-by-{}.txt', {{method: 'PUT'}})"
MARKDOWN_XSS = "\n\n".join([
    f"`a\n\n<img src=x onerror=\"{_PUT.format('code-span')}\">`",
    f"``<img src=x onerror=\"{_PUT.format('double-backtick')}\">",
    f"    ```\n<img src=x onerror=\"{_PUT.format('fake-fence')}\">\n    ```",
    f"[entity](&#106;avascript:{_PUT.format('entity-link')})",
    f"[reference][1]\n\n[1]: javascript:{_PUT.format('reference-link')}",
])
METADATA_XSS = f"1 onerror={_PUT.format('image-width').replace(' ', '')}"
GRADING_ATTACKS: dict[str, tuple[dict[str, str], str | float]] = {
    # the file the grader reads its verdicts from, replaced by something that would block it
    "fifo-in-records": ({"softmax_answer": _code(_RIGHT_SOFTMAX, """
        import os
        records = os.environ["COURSE_GRADING_RECORD"]
        os.makedirs(records, exist_ok=True)
        os.mkfifo(os.path.join(records, "checks-000.jsonl"))
    """)}, 0.0),
    # records written by the answer itself, with a value no check can handle (a negative size)
    "forges-records": ({"softmax_answer": _code(_RIGHT_SOFTMAX, """
        import json, os
        from safetensors.torch import save_file
        records = os.environ["COURSE_GRADING_RECORD"]
        os.makedirs(records, exist_ok=True)
        save_file({"t0": torch.tensor([-1])}, os.path.join(records, "forged.safetensors"))
        with open(os.path.join(records, "checks.jsonl"), "a") as f:
            f.write(json.dumps({"cell": "cross_entropy_visible", "index": 0, "kind": "shape",
                                "actual": {"tensor": "t0"}, "expected": {"list": []},
                                "options": {"name": "forged", "hint": None}, "tensors": "forged.safetensors"}) + "\\n")
    """)}, "softmax"),
    # the tests' own expected values overwritten (torch.softmax is what the test compares with)
    "patches-expected": ({"softmax_answer": _code("""
        torch.softmax = lambda x, dim=-1, **kwargs: x
        def stable_softmax(x, dim=-1):
            return x
    """)}, 0.0),
    # the private /tmp filled past its limit
    "fills-tmp": ({"softmax_answer": _code(_WRONG, """
        chunk = b"x" * 2**25
        for i in range(64):
            with open(f"/tmp/fill-{i}", "wb") as f:
                f.write(chunk)
    """)}, 0.0),
    # scripts for the instructor's browser, in an output and in a written answer
    "xss": ({"softmax_answer": _code(_RIGHT_SOFTMAX, f"""
        from IPython.display import HTML, Markdown, display
        display(HTML({XSS!r}))
        display(Markdown({XSS!r}))
        display(Markdown({MARKDOWN_XSS!r}))
        display({{"image/png": "iVBORw0KGgo=", "text/plain": "a plot"}}, raw=True,
                metadata={{"image/png": {{"width": {METADATA_XSS!r}}}}})
    """), "stability_written": "My answer. " + XSS + "\n\n" + MARKDOWN_XSS}, "softmax"),
    # the hidden tests read back from the kernel in a later cell (linecache, the input history)
    "reads-hidden-source": ({"softmax_answer": _code(_RIGHT_SOFTMAX), "cross_entropy_answer": _code(_RIGHT_CROSS_ENTROPY, """
        import linecache
        print("LEAK", [line for entry in linecache.cache.values() for line in entry[2]])
        print("LEAK", In)
    """)}, "all"),
    # the hidden test's source, carried out in the answer's own exception message
    "raises-hidden-source": ({"softmax_answer": _code("""
        import linecache, sys
        def stable_softmax(x, dim=-1):
            frame = sys._getframe(1)
            while frame is not None and "HIDDEN" not in "".join(linecache.getlines(frame.f_code.co_filename)):
                frame = frame.f_back
            source = "".join(linecache.getlines(frame.f_code.co_filename)) if frame else "not found"
            raise ValueError(source)
    """)}, 0.0),
    # an answer that searches the kernel (its globals, what they hold, every live tensor) for a
    # tensor of the shape and dtype it must return, that sums to 1 like a softmax, and returns it:
    # a test cell holds no expected value, so all it finds is inputs and earlier outputs
    "harvests-the-kernel": ({"softmax_answer": _code("""
        import gc
        import __main__

        def _found(x, dim):
            seen = []
            for name in dir(__main__):
                value = getattr(__main__, name)
                seen += [value, *(value if isinstance(value, (list, tuple)) else []),
                         *(value.values() if isinstance(value, dict) else [])]
            seen += [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
            for value in seen:
                if (isinstance(value, torch.Tensor) and value is not x and value.shape == x.shape
                        and value.dtype == x.dtype and not value.requires_grad
                        and torch.allclose(value.sum(dim), torch.ones((), dtype=x.dtype), atol=1e-4)):
                    return value.clone()
            return None

        def stable_softmax(x, dim=-1):
            found = _found(x, dim)
            return found if found is not None else torch.zeros_like(x)
    """), "cross_entropy_answer": _code(_RIGHT_CROSS_ENTROPY)}, "cross_entropy"),
    # a wrong answer that swaps what a kernel-side comparison would use for exactly one call, and
    # puts it back: nothing is compared in the kernel, so there is nothing to fool
    "one-call-patch": ({"softmax_answer": _code("""
        import __main__

        def stable_softmax(x, dim=-1):
            for module in (torch, torch.testing):
                for name in ("isclose", "allclose", "equal", "assert_close"):
                    original = getattr(module, name, None)
                    if original is None:
                        continue
                    def once(*args, _original=original, _module=module, _name=name, **kwargs):
                        setattr(_module, _name, _original)
                        return True
                    setattr(module, name, once)
            return x
    """), "cross_entropy_answer": _code(_RIGHT_CROSS_ENTROPY)}, "cross_entropy"),
    # every value the kernel holds, carried out in the answer's own exception message
    "raises-kernel-values": ({"softmax_answer": _code("""
        import __main__

        def stable_softmax(x, dim=-1):
            values = {name: getattr(__main__, name) for name in dir(__main__) if not name.startswith("__")}
            raise ValueError(repr({k: v for k, v in values.items() if isinstance(v, (torch.Tensor, float, int))})[:3000])
    """), "cross_entropy_answer": _code(_RIGHT_CROSS_ENTROPY)}, "cross_entropy"),
    # the outputs of the hidden inputs an earlier feedback showed (the notebook's own seeds),
    # remembered: graded with another batch seed, they match nothing (see memorised_softmax)
}
# Attacks that gain nothing and leave nothing to flag: what is checked is that nothing leaks or scores.
UNFLAGGED_ATTACKS = ("reads-hidden-source", "raises-hidden-source", "harvests-the-kernel", "one-call-patch",
                     "raises-kernel-values", "memorised-outputs")


def memorised_softmax() -> str:
    """A stable_softmax that returns the remembered outputs of lesson 00's test inputs with the
    notebook's own seeds (visible and hidden), and its input unchanged for anything else."""
    g = torch.Generator().manual_seed(1)
    cube = torch.randn(2, 3, 4, generator=g)
    scales = torch.tensor([[1000.0, 999.0, 998.0], [-1000.0, -999.0, -998.0]])
    inputs = [(torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]), -1),
              (torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]]), -1), (scales, -1),
              (scales.T, 0), (cube, 0), (cube, 1),
              (torch.tensor([[1000.0, 0.0, -1000.0], [800.0, 799.0, 1.0]], dtype=torch.float64), -1)]
    memory = {(tuple(x.shape), str(x.dtype), dim, tuple(round(v, 4) for v in x.flatten().tolist()[:4])):
              torch.softmax(x, dim=dim).tolist() for x, dim in inputs}
    return _code(f"""
        _MEMORY = {memory!r}

        def stable_softmax(x, dim=-1):
            key = (tuple(x.shape), str(x.dtype), dim if dim >= 0 else -1,
                   tuple(round(v, 4) for v in x.flatten().tolist()[:4]))
            if key in _MEMORY:
                return torch.tensor(_MEMORY[key], dtype=x.dtype)
            return x.clone()
    """)


def with_sources(student_nb, sources: dict[str, str]):
    """The student version with these cells (answers, or written answers by grade_id) replaced."""
    nb = copy.deepcopy(student_nb)
    for cell in nb.cells:
        grade_id = meta(cell).get("grade_id")
        if grade_id in sources:
            cell.source = textwrap.dedent(sources[grade_id]).strip()
    return nb


# Attacks from a cell the learner adds (no nbgrader metadata, or a copy of an answer's): the
# policy reads every cell the learner wrote, not only the answer cells.
ADDED_CELL_ATTACK = _code("""
    torch.isclose = lambda a, b, **kwargs: torch.ones_like(a, dtype=torch.bool)
""")


def with_added_cell(student_nb, after: str, source: str, copy_metadata: bool = False):
    """The student version with a wrong stable_softmax and a new code cell after the answer
    `after`; with `copy_metadata`, the new cell carries a copy of that answer's nbgrader metadata."""
    nb = with_answer(student_nb, "softmax_answer", _WRONG)
    index = next(i for i, c in enumerate(nb.cells) if meta(c).get("grade_id") == after)
    cell = nbformat.v4.new_code_cell(textwrap.dedent(source).strip())
    if copy_metadata:
        cell.metadata["nbgrader"] = copy.deepcopy(nb.cells[index].metadata["nbgrader"])
    nb.cells.insert(index + 1, cell)
    return nb


def escapes_through_numpy(root) -> str:
    """Passes the answer policy (numpy is allowed) and writes into the course folder, which only
    the sandbox prevents; it also tries to read the gradebook and to print it."""
    return _code(f"""
        import numpy as np
        np.array([1, 2, 3]).tofile({str(root / "pwned-by-numpy")!r})
        print(np.fromfile({str(root / "gradebook.db")!r}, dtype=np.uint8)[:100])
    """, _WRONG)


NEVER_FINISHES = textwrap.dedent("""
    while True:  # survives the interrupt: KeyboardInterrupt is caught and the loop goes on
        try:
            while True:
                pass
        except BaseException:
            pass
""")  # no imports: it passes the answer policy, so the deadline is what stops it


def answer_cells(nb) -> list:
    return [c for c in nb.cells if is_answer_cell(c)]


def points(nb, which) -> float:
    return float(sum(meta(c)["points"] for c in nb.cells if which(c)))


def with_edited_tests(student_nb):
    """The untouched student version with every test cell replaced by `pass`."""
    nb = copy.deepcopy(student_nb)
    for cell in nb.cells:
        if is_test_cell(cell):
            cell.source = "pass  # tests removed"
    return nb


def with_hidden_tests_deleted(solution_nb):
    nb = copy.deepcopy(solution_nb)
    nb.cells = [c for c in nb.cells if not is_hidden_test_cell(c)]
    return nb


def with_forbidden_answers(student_nb, answers: dict[str, str]):
    nb = copy.deepcopy(student_nb)
    for cell in answer_cells(nb):
        cell.source = textwrap.dedent(answers[meta(cell)["grade_id"]]).strip()
    return nb


def with_answers(student_nb, answers: dict[str, str]):
    """The student version with these answer cells filled in, the others left unanswered."""
    return with_wrong_answers(student_nb, {grade_id: [source] for grade_id, source in answers.items()}, 0)


def with_wrong_answers(student_nb, answers: dict[str, list[str]], k: int):
    """The student version with the k-th wrong answer in every answer cell that has one (an
    exercise with fewer wrong answers keeps the student's stub)."""
    nb = copy.deepcopy(student_nb)
    for cell in answer_cells(nb):
        wrong = answers.get(meta(cell)["grade_id"])
        if wrong and k < len(wrong):
            cell.source = textwrap.dedent(wrong[k]).strip()
    return nb


def exercise_tests(nb) -> dict[str, list[str]]:
    """{answer grade_id: the grade_ids of the test cells right after it}."""
    tests, current = {}, None
    for cell in nb.cells:
        if is_answer_cell(cell):
            current = meta(cell)["grade_id"]
            tests[current] = []
        elif current is not None and is_test_cell(cell):
            tests[current].append(meta(cell)["grade_id"])
        else:
            current = None
    return tests


def with_answer(student_nb, grade_id: str, source: str):
    """The student version with one answer cell replaced, the others left unanswered."""
    nb = copy.deepcopy(student_nb)
    cells = [c for c in answer_cells(nb) if meta(c)["grade_id"] == grade_id]
    assert len(cells) == 1, f"no answer cell {grade_id!r}"
    cells[0].source = textwrap.dedent(source).strip()
    return nb


def never_finishing(solution_nb):
    """The solution, with a loop that ignores SIGINT and catches BaseException in its first answer."""
    nb = copy.deepcopy(solution_nb)
    first = answer_cells(nb)[0]
    first.source = first.source + "\n" + NEVER_FINISHES
    return nb


def write(nb, path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, path)


# The generic harvester (issue 39): every function an answer cell defines is replaced by one
# that searches the kernel (its globals, and what the lists, tuples and dicts there hold) for a
# value of the type and shape it must return, and returns it. It learns that type and shape from
# the solution, and spoils the solution's own result when it finds nothing. A test cell that held
# an expected value would hand it over; one that only observes hands over nothing.
_HARVEST = '''
def _harvested(function):
    import __main__

    def kind(value):
        if isinstance(value, torch.Tensor):
            return ("tensor", tuple(value.shape), value.dtype)
        if isinstance(value, (list, tuple, dict)):
            return (type(value).__name__, len(value))
        return (type(value).__name__,)

    def spoiled(value):
        if isinstance(value, torch.Tensor):
            return ~value if value.dtype == torch.bool else value + 1
        if isinstance(value, bool):
            return not value
        if isinstance(value, (int, float)):
            return value + 1
        if isinstance(value, str):
            return value + "?"
        if isinstance(value, (list, tuple)):
            return type(value)([spoiled(v) for v in value]) if value else type(value)([0])
        if isinstance(value, dict):
            return {k: spoiled(v) for k, v in value.items()} if value else {0: 0}
        return None

    def harvest(*args, **kwargs):
        right = function(*args, **kwargs)  # only to learn the type and shape it must return
        given = [*args, *kwargs.values()]
        found = [getattr(__main__, name, None) for name in dir(__main__) if not name.startswith("__")]
        found += [v for value in list(found) if isinstance(value, (list, tuple, dict))
                  for v in (value.values() if isinstance(value, dict) else value)]
        for value in found:
            if value is right or callable(value) or any(value is g for g in given):
                continue
            if kind(value) == kind(right):
                return value
        return spoiled(right)

    harvest.__name__ = function.__name__
    return harvest
'''


def harvested_exercises(solution_nb) -> dict[str, list[str]]:
    """{answer grade_id: the names of the functions it defines at top level}, for answers that
    define functions (a class is not harvested)."""
    import ast

    found = {}
    for cell in answer_cells(solution_nb):
        if meta(cell).get("grade") or "def " not in cell.source:
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
        if names:
            found[meta(cell)["grade_id"]] = names
    return found


def with_harvesters(student_nb, solution_nb):
    """The student notebook with every function answer replaced by its harvester."""
    sources = {c.metadata["nbgrader"]["grade_id"]: c.source for c in answer_cells(solution_nb)}
    answers = {grade_id: sources[grade_id] + "\n\n" + _HARVEST + "\n" +
               "\n".join(f"{name} = _harvested({name})" for name in names)
               for grade_id, names in harvested_exercises(solution_nb).items()}
    return with_answers(student_nb, answers)
