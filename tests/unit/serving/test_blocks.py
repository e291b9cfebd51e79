"""course_lib.serving.blocks: the free list and the reference counts."""

from __future__ import annotations

import pytest

from course_lib.serving import BlockAllocator, BlockPoolFullError


def test_blocks_are_handed_out_once_and_come_back_when_released():
    pool = BlockAllocator(3)
    got = [pool.allocate() for _ in range(3)]
    assert sorted(got) == [0, 1, 2]
    assert pool.num_free == 0
    assert pool.num_used == 3
    with pytest.raises(BlockPoolFullError, match="all 3 blocks are in use"):
        pool.allocate()
    pool.release(got[1])
    assert pool.num_free == 1
    assert pool.allocate() == got[1]


def test_a_shared_block_is_free_only_after_its_last_holder_releases_it():
    pool = BlockAllocator(2)
    b = pool.allocate()
    pool.share(b)
    assert pool.refcount(b) == 2
    pool.release(b)
    assert pool.num_free == 1
    assert pool.refcount(b) == 1
    pool.release(b)
    assert pool.num_free == 2


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_a_pool_needs_a_positive_integer_size(bad):
    with pytest.raises(ValueError, match="num_blocks must be an integer >= 1"):
        BlockAllocator(bad)


def test_releasing_a_free_block_is_refused():
    pool = BlockAllocator(2)
    with pytest.raises(ValueError, match="block 1 is free"):
        pool.release(1)
    with pytest.raises(ValueError, match="block must be an id in 0..1"):
        pool.share(5)
