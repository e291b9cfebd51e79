"""Grading the course: `python -m grader VERB ...` (run from the course directory).

    python -m grader autograde [LESSON ...] [--deadline S] [--resume]   grade submitted/
    python -m grader feedback [LESSON ...]                              feedback/ and grades.csv
    python -m grader reference [LESSON ...]                             run the solutions as the reference
    python -m grader check                                              can a sandboxed kernel import course_lib?

Modules: `autograde` (the batch), `sandbox` (bubblewrap kernels), `answer_policy` (what an
answer cell may not do), `verdicts` (checks recorded in the kernel, judged here),
`nbgrader_plugins` (the preprocessors nbgrader_config.py names), `cells` (nbgrader metadata).
Learners never import this package; what they call lives in `course_lib.grading`.
"""
