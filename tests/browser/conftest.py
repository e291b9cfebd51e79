"""Fixtures of the browser tests."""

from __future__ import annotations

import pytest

from tests.browser.test_jupyterlab import _browser


@pytest.fixture
def browser_path() -> str:
    """Chromium's path; the test skips, with the reason, without it or without playwright."""
    path = _browser()
    pytest.importorskip("playwright.sync_api", reason="the playwright package (test extras) is missing")
    return path
