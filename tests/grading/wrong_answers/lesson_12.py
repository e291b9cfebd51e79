"""Lesson 12's wrong answers and right variants (see tests/grading/wrong_answers/__init__.py)."""

from tests.grading.wrong_answers._util import mutate

LESSON = "12_serving"

# Right answers in a learner's style, to put single mistakes into.
_BLOCKS = """
    class BlockManager:
        def __init__(self, num_blocks, block_size):
            self.block_size = block_size
            self.free_list = list(range(num_blocks))
            self.count = {}
            self.table = {}
            self.size = {}

        @property
        def num_free(self):
            return len(self.free_list)

        def add_sequence(self, seq):
            self.table[seq] = []
            self.size[seq] = 0

        def append_slot(self, seq):
            table, n = self.table[seq], self.size[seq]
            copy = None
            if n % self.block_size == 0:
                if not self.free_list:
                    raise BlockPoolFullError("the pool is full")
                block = self.free_list.pop(0)
                self.count[block] = 1
                table.append(block)
            elif self.count[table[-1]] > 1:
                if not self.free_list:
                    raise BlockPoolFullError("the pool is full")
                block = self.free_list.pop(0)
                self.count[block] = 1
                self.count[table[-1]] -= 1
                copy = (table[-1], block)
                table[-1] = block
            self.size[seq] = n + 1
            return table[-1], n % self.block_size, copy

        def fork(self, parent, child):
            self.table[child] = list(self.table[parent])
            self.size[child] = self.size[parent]
            for block in self.table[child]:
                self.count[block] += 1

        def free(self, seq):
            for block in self.table.pop(seq):
                self.count[block] -= 1
                if self.count[block] == 0:
                    self.free_list.append(block)
            del self.size[seq]

        def blocks(self, seq):
            return list(self.table[seq])
"""

_PAGED = """
    def paged_attention_step(q, k_pool, v_pool, block_tables, lengths):
        B, H, d = q.shape
        bs, H_kv = k_pool.shape[1], k_pool.shape[2]
        rows = []
        for b in range(B):
            L = lengths[b]
            idx = torch.tensor(block_tables[b][:math.ceil(L / bs)])
            k = k_pool[idx].reshape(-1, H_kv, d)[:L]
            v = v_pool[idx].reshape(-1, H_kv, d)[:L]
            k = k.repeat_interleave(H // H_kv, dim=1).transpose(0, 1)   # (H, L, d)
            v = v.repeat_interleave(H // H_kv, dim=1).transpose(0, 1)
            w = torch.softmax(q[b][:, None, :] @ k.transpose(1, 2) / math.sqrt(d), dim=-1)
            rows.append((w @ v)[:, 0])
        return torch.stack(rows)
"""

_PLAN = """
    def plan_step(running, waiting, free_blocks, block_size, *, max_batch_size, max_batch_tokens):
        running, waiting = list(running), list(waiting)
        preempt = []
        while running and sum(1 for _, n in running if n % block_size == 0) > free_blocks:
            rid, n = running.pop()
            free_blocks += math.ceil(n / block_size)
            preempt.insert(0, rid)
            waiting.insert(0, (rid, n + 1))
        free_blocks -= sum(1 for _, n in running if n % block_size == 0)
        decode = [rid for rid, _ in running]
        budget = max_batch_tokens - len(decode)
        admit = []
        for rid, n in waiting:
            if len(decode) + len(admit) == max_batch_size:
                break
            if math.ceil(n / block_size) > free_blocks:
                break
            if n > budget and (decode or admit):
                break
            admit.append(rid)
            free_blocks -= math.ceil(n / block_size)
            budget -= n
        return decode, admit, preempt
"""

_ACCEPT = """
    def accept_draft(p, q, draft, u):
        k = len(draft)
        for i in range(k):
            x = int(draft[i])
            if u[i] * q[i, x] >= p[i, x]:
                r = torch.clamp(p[i] - q[i], min=0)
                return i, r / r.sum()
        return k, p[k].clone()
"""

# Plausible wrong answers: the mistakes learners make. The k-th wrong answer of every exercise of
# a lesson share one submission (exercises are graded independently), and each must lose at least
# one of its exercise's points. The round trip grades the first 4 of each exercise (submissions
# wrong-1 to wrong-4); the rest are tried by tools/try_answers.py.
GRADED = 4

WRONG: dict[str, list[str]] = {
    "blocks_answer": [
        mutate(_BLOCKS, """            elif self.count[table[-1]] > 1:
                if not self.free_list:
                    raise BlockPoolFullError("the pool is full")
                block = self.free_list.pop(0)
                self.count[block] = 1
                self.count[table[-1]] -= 1
                copy = (table[-1], block)
                table[-1] = block
""", ""),  # no copy-on-write: writes into the block it shares
        mutate(_BLOCKS, """            for block in self.table.pop(seq):
                self.count[block] -= 1
                if self.count[block] == 0:
                    self.free_list.append(block)""", """            for block in self.table.pop(seq):
                self.free_list.append(block)"""),  # free releases shared blocks too
        mutate(_BLOCKS, """            self.table[child] = list(self.table[parent])
            self.size[child] = self.size[parent]
            for block in self.table[child]:
                self.count[block] += 1""", """            self.table[child] = []
            for block in self.table[parent]:
                new = self.free_list.pop(0)
                self.count[new] = 1
                self.table[child].append(new)
            self.size[child] = self.size[parent]"""),  # fork copies every block instead of sharing
        mutate(_BLOCKS, """                block = self.free_list.pop(0)
                self.count[block] = 1
                self.count[table[-1]] -= 1
                copy = (table[-1], block)""", """                block = self.free_list.pop(0)
                self.count[block] = 1
                copy = (table[-1], block)"""),  # the shared block keeps the writer's count: never freed
        mutate(_BLOCKS, """            self.size[seq] = n + 1
            return table[-1], n % self.block_size, copy""", """            self.size[seq] = n + 1
            return table[-1], n % self.block_size + 1, copy"""),  # slots counted from 1
    ],
    "paged_answer": [
        mutate(_PAGED, "/ math.sqrt(d)", ""),  # no 1/sqrt(head_size)
        mutate(_PAGED, "k = k_pool[idx].reshape(-1, H_kv, d)[:L]\n            v = v_pool[idx].reshape(-1, H_kv, d)[:L]",
               "k = k_pool[idx].reshape(-1, H_kv, d)\n            v = v_pool[idx].reshape(-1, H_kv, d)"),
        # ^ every slot of the last block, leftovers included
        mutate(_PAGED, "k = k.repeat_interleave(H // H_kv, dim=1).transpose(0, 1)   # (H, L, d)\n"
               "            v = v.repeat_interleave(H // H_kv, dim=1).transpose(0, 1)",
               "k = k.repeat(1, H // H_kv, 1).transpose(0, 1)   # (H, L, d)\n"
               "            v = v.repeat(1, H // H_kv, 1).transpose(0, 1)"),  # head h reads KV head h % n_kv_head
        """
        def paged_attention_step(q, k_pool, v_pool, block_tables, lengths):  # pads every row to the longest
            B, H, d = q.shape
            bs, H_kv = k_pool.shape[1], k_pool.shape[2]
            width = max(len(t) for t in block_tables)
            idx = torch.tensor([t + [0] * (width - len(t)) for t in block_tables])
            k = k_pool[idx].reshape(B, -1, H_kv, d).repeat_interleave(H // H_kv, dim=2).transpose(1, 2)
            v = v_pool[idx].reshape(B, -1, H_kv, d).repeat_interleave(H // H_kv, dim=2).transpose(1, 2)
            keep = torch.arange(k.shape[2])[None, :] < torch.tensor(lengths)[:, None]
            s = (q[:, :, None, :] @ k.transpose(-2, -1)) / math.sqrt(d)
            s = s.masked_fill(~keep[:, None, None, :], float("-inf"))
            return (torch.softmax(s, dim=-1) @ v)[:, :, 0]
        """,
        mutate(_PAGED, "idx = torch.tensor(block_tables[b][:math.ceil(L / bs)])",
               "idx = torch.tensor(sorted(block_tables[b][:math.ceil(L / bs)]))"),  # blocks in id order
    ],
    "schedule_answer": [
        mutate(_PLAN, "rid, n = running.pop()", "rid, n = running.pop(0)"),  # preempts the oldest
        mutate(_PLAN, "            if n > budget and (decode or admit):\n                break\n",
               "            if n > budget:\n                break\n"),  # a long prompt never gets in
        mutate(_PLAN, "            if math.ceil(n / block_size) > free_blocks:\n                break\n",
               "            if math.ceil(n / block_size) > free_blocks:\n                continue\n"),
        # ^ skips ahead past a request that does not fit
        mutate(_PLAN, "waiting.insert(0, (rid, n + 1))", "waiting.insert(0, (rid, n))"),  # forgets the newest token
        mutate(_PLAN, "sum(1 for _, n in running if n % block_size == 0) > free_blocks",
               "len(running) > free_blocks"),  # every running request needs a new block
    ],
    "accept_answer": [
        mutate(_ACCEPT, "return k, p[k].clone()", "return k, p[k - 1].clone()"),  # the last draft's row
        mutate(_ACCEPT, "r = torch.clamp(p[i] - q[i], min=0)\n                return i, r / r.sum()",
               "return i, p[i].clone()"),  # resamples from p, not the residual: biased
        mutate(_ACCEPT, "if u[i] * q[i, x] >= p[i, x]:", "if u[i] * p[i, x] >= q[i, x]:"),  # q/p, not p/q
        mutate(_ACCEPT, "r = torch.clamp(p[i] - q[i], min=0)", "r = torch.abs(p[i] - q[i])"),  # |p - q|
        mutate(_ACCEPT, "return i, r / r.sum()", "return i, r"),  # the residual not normalised
    ],
}

# Right answers written differently from the solution (other idioms, another order of
# operations): each must earn its exercise's full points.
RIGHT: dict[str, str] = {
    "blocks_answer": _BLOCKS,
    "paged_answer": """
        def paged_attention_step(q, k_pool, v_pool, block_tables, lengths):
            B, H, d = q.shape
            bs, H_kv = k_pool.shape[1], k_pool.shape[2]
            out = torch.zeros_like(q)
            for b in range(B):
                # online softmax over the blocks (lesson 11): no sequence's keys at once
                m = torch.full((H,), float("-inf"), dtype=q.dtype)
                l = torch.zeros(H, dtype=q.dtype)
                acc = torch.zeros(H, d, dtype=q.dtype)
                for j, block in enumerate(block_tables[b]):
                    n = min(bs, lengths[b] - j * bs)
                    if n <= 0:
                        break
                    k = k_pool[block, :n].repeat_interleave(H // H_kv, dim=1)     # (n, H, d)
                    v = v_pool[block, :n].repeat_interleave(H // H_kv, dim=1)
                    s = torch.einsum("hd,nhd->hn", q[b], k) / d ** 0.5
                    m_new = torch.maximum(m, s.max(dim=1).values)
                    scale = torch.exp(m - m_new)
                    p = torch.exp(s - m_new[:, None])
                    l = l * scale + p.sum(1)
                    acc = acc * scale[:, None] + torch.einsum("hn,nhd->hd", p, v)
                    m = m_new
                out[b] = acc / l[:, None]
            return out
    """,
    "schedule_answer": _PLAN,
    "accept_answer": _ACCEPT,
}

# Answers that call the forbidden reference: the visible points only.
FORBIDDEN: dict[str, str] = {
    "blocks_answer": """
        class BlockManager(ref.BlockTables):
            pass
    """,
    "paged_answer": """
        def paged_attention_step(q, k_pool, v_pool, block_tables, lengths):
            return ref.paged_decode_attention(q, k_pool, v_pool, block_tables, lengths)
    """,
    "schedule_answer": """
        plan_step = ref.plan_step
    """,
    "accept_answer": """
        def accept_draft(p, q, draft, u):
            return ref.accept_draft(p, q, draft, u)
    """,
}
