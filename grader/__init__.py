"""Grading the course: `python -m grader VERB ...` (run from the course directory).

    python -m grader autograde [LESSON ...] [--deadline S] [--resume]   grade submitted/
                     [--seed N] (hidden inputs; default: a new seed per batch)
                     [--jobs N|auto] [--shard I/N] [--engine local|dask] [--scheduler ADDRESS]
    python -m grader merge [COURSE_DIR ...]                             shard runs into this gradebook
    python -m grader feedback [LESSON ...]                              feedback/, grades.csv, grades-by-student.csv
    python -m grader reference [LESSON ...]                             run the solutions as the reference
    python -m grader check                                              can a sandboxed kernel import course_lib?

Modules: `autograde` (the batch: serial, parallel, sharded or on Dask), `gradebook` (one writer:
per-submission copies and shards merged), `merge` (the merge verb), `sandbox` (bubblewrap
kernels), `answer_policy` (what an answer cell may not do), `verdicts` (checks recorded in the
kernel, judged here), `nbgrader_plugins` (the preprocessors nbgrader_config.py names), `cells`
(nbgrader metadata).
Learners never import this package; what they call lives in `course_lib.grading`.
"""
