"""Grading the course: `python -m grader VERB ...` (run from the course directory).

    python -m grader autograde [LESSON ...] [--student ID] [--resume]   grade submitted/
                     [--seed N] (hidden inputs; default: a new seed per batch)
                     [--jobs N|auto] [--shard I/N] [--engine local|dask] [--scheduler ADDRESS]
    python -m grader merge [COURSE_DIR ...]                             shard runs into this gradebook
    python -m grader feedback [LESSON ...] [--student ID]               feedback/, grades.csv, grades-by-student.csv
    python -m grader reference [LESSON ...]                             run the solutions as the reference
    python -m grader check                                              can a sandboxed kernel import course_lib?
    python -m grader flags [LESSON ...]                                 the submissions flagged for review, and why

Modules: the batch (`autograde`: release, reference, plan, engines, merge, report) hands each
submission to `submission`, a declared list of steps over `intake` (integrity, the answer
policy's staged copy), `processes` (nbgrader under a deadline), `replay` (the recorded checks,
judged by `verdicts` against `reference`, the instructor's run) and `flags` (what to review).
`course` builds every path; `engines` runs submissions here, in processes or on Dask;
`gradebook` has one writer (per-submission copies and shards merged by `merge`); `report`,
`feedback` and `grades` write what instructors read; `sandbox` runs kernels in bubblewrap;
`answer_policy` says what an answer cell may not do; `nbgrader_plugins` are the preprocessors
nbgrader_config.py names; `formgrader` serves the Formgrader with a policy on submission pages;
`sanitize` cleans what a browser renders; `cells` reads nbgrader metadata.
Learners never import this package; what they call lives in `course_lib.grading`.
"""
