"""Shared fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def shakespeare() -> str:
    from course_lib.data import load_text

    return load_text("tinyshakespeare", download=False)
