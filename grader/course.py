"""A course folder and every path the grader reads or writes in it, built in one place (as
nbgrader's `CourseDirectory` builds its own), and the configuration nbgrader reads there.

    solutions/<lesson>/             the instructor's notebooks (hidden tests included)
    notebooks/<lesson>/             the release learners get (`make release`)
    submitted/<student>/<lesson>/   what learners handed in; never changed by grading
    autograded/<student>/<lesson>/  the graded notebooks, and autograded/autograde-report.csv
    feedback/<student>/<lesson>/    the feedback pages
    gradebook.db                    nbgrader's gradebook
    .grading/                       the grader's own: staged copies, kernel specs, references,
                                    per-job gradebooks, shards, the setup lock
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.cells import lesson_names
from grader.report import REPORT

GRADING = Path(".grading")
STAGING = GRADING / "staged"  # relative to the course root, like submitted/


@dataclass(frozen=True)
class Course:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "nbgrader_config.py"

    @property
    def grading(self) -> Path:
        return self.root / GRADING

    @property
    def course_lib(self) -> Path:
        return self.root / "course_lib"

    @property
    def report(self) -> Path:
        return self.root / "autograded" / REPORT

    def lessons(self) -> list[str]:
        """The folders of solutions/, in order (none if there is no solutions/)."""
        return lesson_names(self.root) if (self.root / "solutions").is_dir() else []

    def solutions(self, lesson: str) -> Path:
        return self.root / "solutions" / lesson

    def released(self, lesson: str) -> Path:
        return self.root / "notebooks" / lesson

    def released_notebooks(self, lesson: str) -> list[Path]:
        return sorted(self.released(lesson).glob("*.ipynb"))

    def submissions(self, lesson: str) -> list[Path]:
        """submitted/<student>/<lesson>/ of every student who handed the lesson in, by student id."""
        return sorted((self.root / "submitted").glob(f"*/{lesson}"))

    def graded(self, lesson: str) -> list[Path]:
        """autograded/<student>/<lesson>/ of every graded submission of the lesson, by student id."""
        return sorted((self.root / "autograded").glob(f"*/{lesson}"))

    def submitted(self, student: str, lesson: str) -> Path:
        return self.root / "submitted" / student / lesson

    def staged(self, student: str, lesson: str) -> Path:
        return self.root / STAGING / student / lesson

    def autograded(self, student: str, lesson: str) -> Path:
        return self.root / "autograded" / student / lesson

    def feedback(self, student: str, lesson: str) -> Path:
        return self.root / "feedback" / student / lesson


def nbgrader_config(root: Path):
    """The configuration `nbgrader` reads when it runs in the course folder `root`: every
    nbgrader_config.py on Jupyter's config path (~/.jupyter, /etc/jupyter, ...), then the course's
    own, which wins (traitlets' order, as nbgrader's apps load them)."""
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config import Config
    from traitlets.config.loader import ConfigFileNotFound, PyFileConfigLoader

    config = Config()
    for folder in [*reversed(jupyter_config_path()), str(root)]:
        try:
            config.merge(PyFileConfigLoader("nbgrader_config.py", path=folder).load_config())
        except ConfigFileNotFound:
            continue
    return config
