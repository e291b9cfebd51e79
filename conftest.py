"""Root pytest hooks: keep each notebook, and each lesson's grading round trip, on one xdist worker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Maintainers and CI keep the corpus in ../shared/data (no downloads in tests). Kernels that
# nbval and nbgrader start inherit this variable.
SHARED_DATA = Path(__file__).resolve().parent.parent / "shared" / "data"
if "COURSE_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["COURSE_DATA_DIR"] = str(SHARED_DATA)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        path = str(item.path)
        if path.endswith(".ipynb"):
            item.add_marker(pytest.mark.xdist_group(f"nbval:{item.path.name}"))
        elif "/tests/grading/" in path and hasattr(item, "callspec"):
            item.add_marker(pytest.mark.xdist_group(f"grading:{item.callspec.id}"))
