"""grader/precheck.py: a kernel can import this course's course_lib, or nothing is graded and the cause is named."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from grader import precheck, sandbox

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(sandbox.bwrap_path() is None, reason="needs bwrap")
def test_the_precheck_passes_here_and_names_the_cause_for_a_course_without_course_lib(tmp_path):
    assert precheck.check(ROOT) == str(sandbox.COURSE_LIB_MOUNT)
    course = tmp_path / "course"  # not a course directory
    course.mkdir()
    with pytest.raises(precheck.GradingSetupError, match="has no course_lib/: point the grader at the course directory"):
        precheck.check(course)


@pytest.mark.skipif(sandbox.bwrap_path() is None, reason="needs bwrap")
def test_the_precheck_fails_loudly_when_course_lib_cannot_be_imported(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "course_lib", course / "course_lib", ignore=shutil.ignore_patterns("__pycache__", "*.pt"))
    (course / "course_lib" / "__init__.py").write_text("raise ImportError('broken on purpose')\n")
    with pytest.raises(precheck.GradingSetupError, match="broken on purpose"):
        precheck.check(course)


@pytest.mark.skipif(sandbox.bwrap_path() is None, reason="needs bwrap")
def test_a_grader_run_through_a_symlinked_venv_passes_the_precheck(tmp_path):
    """sys.executable and sys.prefix are the symlink's paths: the sandbox must bind them too."""
    import subprocess

    (tmp_path / ".venv").symlink_to(Path(sys.prefix).resolve())
    python = tmp_path / ".venv" / "bin" / "python"
    done = subprocess.run([str(python), "-m", "grader", "check", "--root", str(ROOT)], capture_output=True, text=True,
                          check=False, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "imports the course's course_lib" in done.stdout


@pytest.mark.skipif(sandbox.bwrap_path() is None, reason="needs bwrap")
def test_the_precheck_fails_when_no_data_set_reaches_the_kernel_and_passes_with_the_courses_data_folder(
        tmp_path, monkeypatch):
    """A kernel has no network: a data set neither in $COURSE_DATA_DIR, the course's data/ nor the
    cache would make every submission's demo cells fail. The pre-check says so before grading."""
    from course_lib.data import data_path

    corpus = data_path(download=False)  # this machine's copy (CI: COURSE_DATA_DIR)
    course = tmp_path / "course"
    course.mkdir()
    (course / "course_lib").symlink_to(ROOT / "course_lib")
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(precheck.GradingSetupError, match="cannot read the data sets the lessons load"):
        precheck.check(course)
    monkeypatch.delenv("COURSE_DATA_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-cache"))
    (course / "data").mkdir()
    shutil.copy(corpus, course / "data" / corpus.name)
    assert sandbox.data_dir(course) == (course / "data").resolve()
    assert precheck.check(course) == str(sandbox.COURSE_LIB_MOUNT), "the course's data/ did not reach the kernel"
