"""Root pytest configuration (applies to nbval runs on solutions/ as well as to tests/)."""

from __future__ import annotations

import os
from pathlib import Path

# Maintainers and CI keep the corpus in ../shared/data (no downloads in tests). Kernels that
# nbval and nbgrader start inherit this variable.
SHARED_DATA = Path(__file__).resolve().parent.parent / "shared" / "data"
if "COURSE_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["COURSE_DATA_DIR"] = str(SHARED_DATA)
