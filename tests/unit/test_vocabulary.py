"""course_lib/vocabulary.py: one name for each size in the course's code; the public API's older
keyword names (COURSE_DESIGN.md) still reach the same parameters."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch

from course_lib.attention import LinformerAttention, MultiHeadAttention, kv_cache_bytes
from course_lib.embeddings import sinusoidal_positional_encoding
from course_lib.kv_cache import KVCache
from course_lib.positional import alibi_bias, alibi_slopes
from course_lib.vocabulary import OLDER_NAMES

ROOT = Path(__file__).resolve().parents[2]
OLDER_KEYWORD = re.compile(r"[(,]\s*(" + "|".join(OLDER_NAMES) + r")\s*=(?!=)")
# The notes' own module, quoted as printed in lesson 03, keeps its authors' names.
QUOTED = "notes_mha_source = "


def test_the_public_api_takes_its_older_keyword_names():
    assert kv_cache_bytes(n_layers=96, n_kv_heads=96, d_head=128, bytes_per_value=4) == kv_cache_bytes(96, 96, 128, 4)
    assert torch.equal(sinusoidal_positional_encoding(seq_len=5, d_model=8), sinusoidal_positional_encoding(5, 8))
    assert torch.equal(alibi_slopes(n_heads=6), alibi_slopes(6))
    assert torch.equal(alibi_bias(n_heads=4, T=3), alibi_bias(4, 3))
    torch.manual_seed(0)
    old = MultiHeadAttention(d_model=32, n_heads=8, n_kv_heads=2)
    assert (old.n_embd, old.n_head, old.n_kv_head, old.head_size) == (32, 8, 2, 4)
    assert LinformerAttention(d_model=16, n_heads=4, seq_len=8, k=4).n_head == 4
    cache = KVCache(n_layers=2, batch_size=1, n_kv_heads=3, max_len=5, d_head=4)
    assert (cache.n_layer, cache.n_kv_head, cache.head_size) == (2, 3, 4)


def test_two_names_for_one_size_are_refused_and_no_object_answers_to_the_older_ones():
    with pytest.raises(TypeError, match="both n_heads= and n_head="):
        MultiHeadAttention(32, n_head=8, n_heads=8)
    with pytest.raises(TypeError, match="both n_layers= and n_layer="):
        KVCache(n_layer=2, n_layers=2, batch_size=1, n_kv_head=3, max_len=5, head_size=4)
    mha, cache = MultiHeadAttention(32, 8, 2), KVCache(2, 1, 3, 5, 4)
    assert [n for n in OLDER_NAMES if hasattr(mha, n) or hasattr(cache, n)] == []


def _code_cells():
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and QUOTED not in cell.source:
                yield f"solutions/{path.parent.name}", cell.source


def test_nothing_in_the_course_passes_an_older_name():
    sources = [(str(p.relative_to(ROOT)), p.read_text()) for folder in ("course_lib", "grader", "tools", "benchmarks")
               for p in sorted((ROOT / folder).rglob("*.py"))]
    sources += list(_code_cells())
    found = [f"{where}: {m.group(0)}" for where, source in sources for m in OLDER_KEYWORD.finditer(source)]
    assert found == [], f"older keyword names passed in the course (use {OLDER_NAMES}): {found[:8]}"
