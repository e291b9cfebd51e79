"""Shared fixtures."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def shakespeare() -> str:
    from course_lib.data import load_text

    return load_text("tinyshakespeare", download=False)


@pytest.fixture
def one_thread():
    """Small models run faster on one thread, and much faster on a busy 2-core machine, where
    two threads waiting for each other at every op made some tests 20x slower. Test modules opt in
    with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
