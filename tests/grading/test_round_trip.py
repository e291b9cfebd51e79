"""The nbgrader pipeline, end to end, for every lesson, in a temporary course directory.

Scores are read from the gradebook, never from exit codes. Every submission is graded by
grader/autograde.py, the code behind `make autograde`.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import nbformat
import psutil
import pytest

from course_lib.grading_env import UNWRITTEN
from grader import autograde as ag
from grader import processes, reference, sandbox
from grader.cells import lesson_names
from tests.grading import submissions as subs
from tests.grading.wrong_answers import GRADED_WRONG

ROOT = Path(__file__).resolve().parents[2]
LESSONS = lesson_names(ROOT)
TABLE_DIR = ROOT / "build" / "round_trip"
LOOP_DEADLINE_S = 10  # lesson 00 reaches the loop in about 3 s; the loop spins a core until killed
#: The hidden inputs of the policy-off batch: another seed than the notebook's own (0).
BATCH_SEED = 20261127
EDITS = "calls-reference-edits-tests"
#: The honest submission: the solution, its answers rewritten where RIGHT_VARIANTS has another way
#: to write them (each must keep every point), graded like any learner's.
HONEST_WORK = "solution-rewritten"
#: The submission whose every function answer returns what it finds in the kernel.
HARVESTER = "harvests-the-kernel"
# The instructor's run of each solution, which every submission's checks are replayed against
# (grader/verdicts.py): shared by both halves of a lesson, computed once per change of the solution.
REFERENCE_CACHE = ROOT / "build" / "verdict-reference"
# Attacks on the verdict itself, graded once more with the answer policy off: the replay of the
# recorded checks in the grader's process must give them 0 by itself.
REPLAY_ATTACKS = ("patches-isclose", "helper-via-globals", "obfuscated-import")
# Kernels run in the bubblewrap sandbox wherever it works; CI (.ci/run) installs bubblewrap and
# sets REQUIRE_SANDBOX=1, so that there a missing sandbox fails instead of grading unsandboxed.
SANDBOX = sandbox.bwrap_path() is not None
if os.environ.get("REQUIRE_SANDBOX") == "1" and not SANDBOX:
    raise RuntimeError("REQUIRE_SANDBOX=1 but bwrap is missing or cannot create namespaces: " + ag.NO_SANDBOX)


def _strip_volatile(nb) -> dict:
    data = json.loads(nbformat.writes(nb))
    data["metadata"].pop("widgets", None)
    return data


# Each lesson's honest, cheating and wrong submissions are graded as one batch in one course
# directory (what a batch costs besides its submissions is paid once). The first lesson has two
# more parts, each its own batch and course directory, which pytest-xdist (--dist loadscope) can
# give to the other worker: the hostile batch and the same attacks with the answer policy off.
HONEST, CHEATS, HOSTILE, POLICY_OFF, WRONG = "honest", "cheats", "hostile", "policy-off", "wrong"
PARTS = (HONEST, CHEATS, HOSTILE, POLICY_OFF, WRONG)
LESSON_PARTS = (HONEST, CHEATS, WRONG)
WRONG_PER_EXERCISE = 3  # plausible wrong answers per exercise, at least
# How many of each exercise's wrong answers a lesson's round trip grades (one submission each):
# its module's GRADED (tests/grading/wrong_answers/lesson_NN.py), the first three and those of its
# contract checks.
WRONG_GRADED = GRADED_WRONG


def _batches(part, lesson, root, solution, student) -> list[tuple[dict, dict]]:
    """The submissions of one part, as batches of ({name: (notebook, expected points)},
    keyword arguments of ag.autograde), graded in order; within a batch, in name order.

    HONEST: the solution with every right variant (HONEST_WORK), full marks; the untouched
    student version, 0. WRONG: the k-th wrong answer of every exercise in submission wrong-k
    (expected None: each exercise must lose points, checked per exercise by RoundTripWrong). CHEATS: the forbidden
    references called with the test cells edited, the visible points only; on the first lesson
    also hidden tests deleted (the visible points) and a runaway loop (0). Deleting and the
    runaway test the grader, not the lesson, so they run once: each costs a full execution of
    the notebook, and CI time is bounded. HOSTILE and POLICY_OFF (first lesson): attacks, each
    0, then an honest classmate with full marks."""
    all_points = subs.points(solution, subs.is_test_cell)
    visible_points = all_points - subs.points(solution, subs.is_hidden_test_cell)
    batch = {"deadline": 600}
    if part == HONEST:
        honest = subs.with_answers(solution, subs.RIGHT_VARIANTS.get(lesson, {}))
        return [({HONEST_WORK: (honest, all_points), "untouched-student": (student, 0.0)}, batch)]
    if part == WRONG:
        wrong = subs.WRONG_ANSWERS[lesson]
        submissions = {f"wrong-{k + 1}": (subs.with_wrong_answers(student, wrong, k), None)
                       for k in range(WRONG_GRADED.get(lesson, WRONG_PER_EXERCISE))}
        submissions[HARVESTER] = (subs.with_harvesters(student, solution), None)
        return [(submissions, batch)]
    if part == CHEATS:
        # The cheats share a submission: answers that call the forbidden reference also have
        # their test cells replaced by `pass`. Restored tests and forbidden calls together leave
        # exactly the visible points.
        if lesson in subs.FORBIDDEN_ANSWERS:
            cheat = subs.with_edited_tests(subs.with_forbidden_answers(student, subs.FORBIDDEN_ANSWERS[lesson]))
            batches = [({EDITS: (cheat, visible_points)}, batch)]
        else:
            batches = [({EDITS: (subs.with_edited_tests(student), 0.0)}, batch)]
        if lesson == LESSONS[0]:
            batches[0][0]["deletes-hidden-tests"] = (subs.with_hidden_tests_deleted(solution), visible_points)
            batches.append(({"never-finishes": (subs.never_finishing(solution), 0.0)}, {"deadline": LOOP_DEADLINE_S}))
        return batches
    attacks = {}
    if part == HOSTILE:
        for attack, source in subs.HOSTILE_ANSWERS.items():
            attacks[f"hostile-{attack}"] = source
        classmate, options = "zz-honest-classmate", batch
    else:
        sources = {**{a: subs.HOSTILE_ANSWERS[a] for a in REPLAY_ATTACKS}, **(subs.SANDBOX_ATTACKS if SANDBOX else {})}
        if SANDBOX:  # the policy names the gradebook; without it, only the sandbox stops this
            sources["escapes-through-numpy"] = subs.escapes_through_numpy(root)
        attacks = {f"policy-off-{a}": source for a, source in sources.items()}
        # a batch seed of its own: the hidden inputs differ from the notebook's (memorised outputs
        # match nothing), and the reference runs once with that seed
        classmate, options = "policy-off-zz-honest-classmate", {"deadline": 120, "enforce_policy": False,
                                                                "seed": BATCH_SEED}
    submissions = {name: (subs.with_answer(student, "softmax_answer", source), 0.0) for name, source in attacks.items()}
    if part == HOSTILE:
        submissions["hostile-added-cell"] = (subs.with_added_cell(student, "softmax_answer", subs.ADDED_CELL_ATTACK), 0.0)
        submissions["hostile-added-cell-with-copied-metadata"] = (
            subs.with_added_cell(student, "softmax_answer", subs.ADDED_CELL_ATTACK, copy_metadata=True), 0.0)
    if part == POLICY_OFF:
        tests_of = subs.exercise_tests(solution)
        points = {subs.meta(c)["grade_id"]: float(subs.meta(c)["points"]) for c in solution.cells if subs.is_test_cell(c)}
        earned = {"softmax": sum(points[cell] for cell in tests_of["softmax_answer"]), "all": all_points,
                  "cross_entropy": sum(points[cell] for cell in tests_of["cross_entropy_answer"])}
        for name, (sources, honest) in subs.GRADING_ATTACKS.items():
            submissions[f"policy-off-{name}"] = (subs.with_sources(student, sources), earned.get(honest, honest))
        # remembered outputs of the notebook's own inputs: only the visible test's fixed inputs still match
        submissions["policy-off-memorised-outputs"] = (
            subs.with_sources(student, {"softmax_answer": subs.memorised_softmax(),
                                        "cross_entropy_answer": subs._code(subs._RIGHT_CROSS_ENTROPY)}),
            points["softmax_visible"] + earned["cross_entropy"])
    submissions[classmate] = (solution, all_points)  # graded after every attack (name order)
    return [(submissions, options)]


@pytest.fixture(scope="class")
def graded(request, tmp_path_factory):
    """A course directory with one lesson released, submitted in the ways of the class's parts
    (`_batches`; batches with the same options graded as one), and autograded."""
    lesson, parts = request.cls.lesson, request.cls.parts
    root = tmp_path_factory.mktemp(f"course-{lesson}-{'-'.join(parts)}")
    shutil.copy(ROOT / "nbgrader_config.py", root)
    (root / "course_lib").symlink_to(ROOT / "course_lib")  # kernels import the graded course's course_lib
    shutil.copytree(ROOT / "solutions" / lesson, root / "solutions" / lesson)
    if (ROOT / reference.STORED / lesson).exists():  # the solution's checks, stored by make execute-solutions
        shutil.copytree(ROOT / reference.STORED / lesson, root / reference.STORED / lesson)
    done = processes.nbgrader(root, "generate_assignment", lesson, "--force")
    assert done.returncode == 0, f"generate_assignment failed:\n{done.stdout}\n{done.stderr}"

    name = f"{lesson}.ipynb"
    solution = nbformat.read(root / "solutions" / lesson / name, as_version=4)
    student = nbformat.read(root / "notebooks" / lesson / name, as_version=4)
    expected, part_of, batches = {}, {}, []  # batches: [(options, [student])]
    for part in parts:
        for submissions, options in _batches(part, lesson, root, solution, student):
            for student_name, (notebook, points) in submissions.items():
                subs.write(notebook, root / "submitted" / student_name / lesson / name)
                expected[student_name], part_of[student_name] = points, part
            same = [names for opts, names in batches if opts == options]
            if same:
                same[0].extend(submissions)
            else:
                batches.append((options, list(submissions)))
    results = []
    for options, names in batches:
        results += ag.autograde(root, [lesson], students=sorted(names), use_sandbox=SANDBOX,
                                reference_cache=REFERENCE_CACHE, **options)

    by_student = {r.student: r for r in results}
    lost = {s: _points_lost(root, lesson, solution, s) for s, e in expected.items() if e is None}
    TABLE_DIR.mkdir(parents=True, exist_ok=True)
    all_points = subs.points(solution, subs.is_test_cell)
    rows = [f"{lesson}\t{part_of[s]}: {s}\t{'<' + format(all_points, 'g') if e is None else format(e, 'g')}\t{by_student[s].auto_score:g}"
            f"\t{by_student[s].status}\t{by_student[s].seconds:.1f}"
            f"\t{'; '.join(by_student[s].flags + [_describe_lost(lost[s])] if s in lost else by_student[s].flags)}"
            for s, e in expected.items()]
    (TABLE_DIR / f"{lesson}-{'-'.join(parts)}.tsv").write_text("\n".join(rows) + "\n")
    return {"lesson": lesson, "root": root, "expected": expected, "results": by_student, "lost": lost,
            "release": root / "notebooks" / lesson / name, "part_of": part_of}


def _points_lost(root: Path, lesson: str, solution, student: str) -> dict[str, dict[str, float]]:
    """{exercise (answer grade_id): {test cell: points lost}} of one graded submission, read from
    the gradebook; a cell that earned all its points is left out."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        submission = gb.find_submission(lesson, student)
        earned = {g.name: float(g.score) for nb in submission.notebooks for g in nb.grades if g.cell.cell_type == "code"}
        maximum = {g.name: float(g.max_score) for nb in submission.notebooks for g in nb.grades if g.cell.cell_type == "code"}
    return {exercise: {cell: maximum[cell] - earned.get(cell, 0.0) for cell in cells if earned.get(cell, 0.0) < maximum[cell]}
            for exercise, cells in subs.exercise_tests(solution).items()}


def _describe_lost(lost: dict[str, dict[str, float]]) -> str:
    return "; ".join(f"{exercise}: " + (", ".join(f"-{p:g} in {cell}" for cell, p in cells.items()) or "FULL MARKS")
                     for exercise, cells in lost.items())


def _hidden_lines(root: Path, lesson: str) -> set[str]:
    """Lines of hidden-test code that appear nowhere else in the solution notebook."""
    solution = nbformat.read(root / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    hidden_parts = [c.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
                    for c in solution.cells if subs.is_hidden_test_cell(c)]
    shown_elsewhere = {line.strip() for c in solution.cells if not subs.is_hidden_test_cell(c)
                       for line in c.source.splitlines()}
    return {line.strip() for part in hidden_parts for line in part.splitlines()
            if len(line.strip()) > 30 and line.strip() not in shown_elsewhere}


class RoundTrip:
    """What every part checks; one class per lesson (its honest, cheating and wrong parts) and
    per attack part, so pytest-xdist (--dist loadscope) grades them on different workers."""

    lesson: str
    parts: tuple[str, ...]

    def test_every_submission_gets_the_expected_score(self, graded):
        """Submissions with an expected score get exactly it (wrong answers, expected None, are
        checked per exercise by RoundTripWrong)."""
        expected = {s: e for s, e in graded["expected"].items() if e is not None}
        got = {s: graded["results"][s].auto_score for s in expected}
        assert got == expected, f"autograded scores differ: got {got}, expected {expected}"


class RoundTripHonest(RoundTrip):
    """The checks on the honest part of one lesson."""


    def test_release_matches_committed_notebooks(self, graded):
        committed = ROOT / "notebooks" / graded["lesson"] / f"{graded['lesson']}.ipynb"
        assert committed.exists(), f"{committed} is missing: run `make release` and commit notebooks/"
        fresh = _strip_volatile(nbformat.read(graded["release"], as_version=4))
        ours = _strip_volatile(nbformat.read(committed, as_version=4))
        differing = [i for i, (a, b) in enumerate(zip(fresh["cells"], ours["cells"], strict=False)) if a != b]
        assert fresh == ours, (
            f"{committed} differs from what `make release` generates from solutions/ "
            f"(cells {differing[:5]}, {len(fresh['cells'])} vs {len(ours['cells'])} cells): run `make release` and commit"
        )


    def test_honest_work_and_untouched_student_are_graded_without_flags(self, graded):
        for student in (HONEST_WORK, "untouched-student"):
            result = graded["results"][student]
            assert result.status == "graded", f"{student}: {result.status} {result.flags}"
            assert result.flags == [], f"{student} should raise no flags, got {result.flags}"


    def test_student_notebook_fails_only_in_test_cells(self, graded):
        """Executing the released notebook unchanged: the only cells that may raise are test cells."""
        lesson = graded["lesson"]
        executed = nbformat.read(graded["root"] / "autograded" / "untouched-student" / lesson / f"{lesson}.ipynb", as_version=4)
        failing = [c for c in executed.cells if c.cell_type == "code" and any(o.output_type == "error" for o in c.outputs)]
        not_tests = [c.get("id") or c.source[:60] for c in failing if not subs.is_test_cell(c)]
        assert failing, "the untouched student notebook should fail its test cells"
        assert not_tests == [], f"cells other than test cells fail in the student version: {not_tests}"
        first_lines = {c.metadata["nbgrader"]["grade_id"]: next(o for o in c.outputs if o.output_type == "error").evalue
                       for c in failing}
        unclear = {cell: line[:120] for cell, line in first_lines.items() if UNWRITTEN not in line}
        assert unclear == {}, f"an untouched exercise's test should say it is not written yet: {unclear}"


    def test_feedback_strips_hidden_tests_and_grades_export(self, graded):
        """The full-marks, the unanswered and a wrong submission: a failed hidden test shows
        only its message, never the test's code (which a traceback would quote). Three pages of
        seven (each about a second); the first lesson's policy-off batch writes every page."""
        from grader import feedback

        root, lesson = graded["root"], graded["lesson"]
        pages = [HONEST_WORK, "untouched-student", "wrong-1"]
        written, failed = feedback.generate_feedback(root, [lesson], students=pages)
        assert failed == [], f"generate_feedback failed: {failed}"
        assert sorted(written) == sorted(f"{lesson}/{s}" for s in pages), written
        hidden_lines = _hidden_lines(root, lesson)
        for student in pages:
            html = (root / "feedback" / student / lesson / f"{lesson}.html").read_text()
            assert "BEGIN HIDDEN TESTS" not in html
            leaked = [line for line in hidden_lines if line in html]
            assert leaked == [], f"{student}'s feedback HTML shows hidden-test code: {leaked[:3]}"
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
            gb.add_student("absent")  # in the class, submitted nothing
        assert feedback.export_grades(root) is None
        written_answers = any(c.cell_type == "markdown" and subs.meta(c).get("grade") for c in
                              nbformat.read(root / "solutions" / lesson / f"{lesson}.ipynb", as_version=4).cells)
        waiting = feedback.awaiting_manual_grades(root, [lesson])
        assert (f"{lesson}/{HONEST_WORK}" in waiting) == written_answers, (
            f"feedback before manual grading must be told apart (written answers: {written_answers}): {waiting}")
        rows = {r["student_id"]: r for r in csv.DictReader((root / "grades.csv").open())}
        assert rows[HONEST_WORK]["status"] == "submitted"
        assert float(rows[HONEST_WORK]["autograded_score"]) == graded["expected"][HONEST_WORK]
        assert (rows["absent"]["status"], rows["absent"]["score"]) == ("missing", ""), rows["absent"]
        by_student = {r["student_id"]: r for r in csv.DictReader((root / "grades-by-student.csv").open())}
        assert by_student["absent"][lesson] == "missing"
        assert float(by_student[HONEST_WORK][lesson]) == float(rows[HONEST_WORK]["score"])


class RoundTripCheats(RoundTrip):
    """The checks on the cheating part of one lesson."""


    def test_edited_and_deleted_test_cells_are_reported(self, graded):
        edited = graded["results"][EDITS].flags
        assert edited, "editing test cells must be reported"
        assert all(f.startswith("edited test cell") for f in edited), edited
        if "deletes-hidden-tests" not in graded["expected"]:
            return  # deleting is proven on the first lesson only
        deleted = graded["results"]["deletes-hidden-tests"].flags
        assert deleted, "deleting hidden test cells must be reported"
        assert all(f.startswith("deleted test cell") for f in deleted), deleted

    def test_runaway_submission_is_killed_and_scores_zero(self, graded):
        if "never-finishes" not in graded["expected"]:
            pytest.skip("the runaway loop is proven on the first lesson only")
        result = graded["results"]["never-finishes"]
        assert result.status == "did not finish", f"expected the deadline to kill it, got {result.status}: {result.flags}"
        assert result.seconds < LOOP_DEADLINE_S + 20, f"killing took {result.seconds:.0f} s"


class RoundTripWrong(RoundTrip):
    """Plausible wrong answers (tests/grading/submissions.py WRONG_ANSWERS): none may earn an
    exercise's full points; the table says which test cell caught each."""

    def test_every_wrong_submission_is_graded_without_flags(self, graded):
        """Wrong answers are honest work: graded to the end, nothing flagged."""
        for student, result in graded["results"].items():
            if graded["part_of"][student] != WRONG:
                continue
            assert result.status == "graded", f"{student}: {result.status} {result.flags}"
            assert result.flags == [], f"{student} should raise no flags, got {result.flags}"

    def test_every_exercise_has_enough_wrong_answers(self, graded):
        solution = nbformat.read(graded["root"] / "solutions" / graded["lesson"] / f"{graded['lesson']}.ipynb", as_version=4)
        exercises = set(subs.exercise_tests(solution))
        counts = {e: len(subs.WRONG_ANSWERS[graded["lesson"]].get(e, [])) for e in exercises}
        short = {e: n for e, n in counts.items() if n < WRONG_PER_EXERCISE}
        assert short == {}, f"exercises with fewer than {WRONG_PER_EXERCISE} wrong answers: {short}"

    def test_no_wrong_answer_earns_full_points(self, graded):
        """Nor does the generic harvester: a function that returns whatever value of the right type
        and shape it finds in the kernel finds no expected value there (it harvests functions, not
        classes)."""
        harvested = subs.harvested_exercises(nbformat.read(graded["root"] / "solutions" / graded["lesson"] /
                                                           f"{graded['lesson']}.ipynb", as_version=4))
        full_marks = [f"{student}: {exercise}" for student, lost in graded["lost"].items()
                      for exercise, cells in lost.items() if not cells
                      and (student != HARVESTER or exercise in harvested)]
        assert full_marks == [], f"wrong answers that earned their exercise's full points: {full_marks}"


class RoundTripAttacks(RoundTrip):
    """What both attack parts of the first lesson check."""

    classmate: str

    def test_every_attack_is_flagged_with_a_reason_and_the_classmate_after_them_is_not(self, graded):
        secrecy = {f"policy-off-{a}" for a in subs.UNFLAGGED_ATTACKS}  # checked for leaks instead
        unflagged = [s for s, r in graded["results"].items() if s != self.classmate and not r.flags and s not in secrecy]
        assert unflagged == [], f"attacks graded without a flag for the instructor: {unflagged}"
        honest = graded["results"][self.classmate]
        assert honest.flags == [], f"{self.classmate} should raise no flag, got {honest.flags}"
        assert honest.auto_score == graded["expected"][self.classmate], honest

    def test_feedback_for_every_submission_leaks_no_hidden_test_and_grades_export(self, graded):
        from grader import feedback

        root, lesson = graded["root"], graded["lesson"]
        assert feedback.main([lesson, "--root", str(root)]) == 0  # every page, then grades.csv
        assert (root / "grades.csv").exists()
        graded_ok = {s for s, r in graded["results"].items() if r.status == "graded"}
        written = {page.parent.parent.name for page in (root / "feedback").glob(f"*/{lesson}/{lesson}.html")}
        assert written == graded_ok
        hidden = _hidden_lines(root, lesson)
        for student in graded_ok:
            html = (root / "feedback" / student / lesson / f"{lesson}.html").read_text()
            leaked = [line for line in hidden if line in html]
            assert leaked == [], f"{student}'s feedback shows hidden-test code: {leaked[:3]}"


class RoundTripHostile(RoundTripAttacks):
    """Hostile answers under the full protection (first lesson only)."""

    parts = (HOSTILE,)
    classmate = "zz-honest-classmate"

    def test_hostile_answers_are_withheld_by_the_policy(self, graded):
        hostile = {s: r for s, r in graded["results"].items() if s.startswith("hostile-")}
        assert set(hostile) >= {f"hostile-{a}" for a in subs.HOSTILE_ANSWERS}, sorted(hostile)
        unflagged = [s for s, r in hostile.items()
                     if not any("withheld by the grading policy" in f for f in r.flags)]
        assert unflagged == [], f"hostile submissions not withheld: {unflagged}"

    def test_a_cell_the_learner_added_is_read_by_the_policy_too(self, graded):
        """An added cell is checked like an answer (named by its position); one that copies an
        answer's nbgrader metadata is flagged for it and checked as an added cell."""
        added = graded["results"]["hostile-added-cell"].flags
        assert any("withheld by the grading policy" in f and "added or edited cell" in f for f in added), added
        copied = graded["results"]["hostile-added-cell-with-copied-metadata"].flags
        assert any("nbgrader metadata that the release does not have" in f for f in copied), copied
        assert any("withheld by the grading policy" in f and "added or edited cell" in f for f in copied), copied


class RoundTripPolicyOff(RoundTripAttacks):
    """The same attacks with the answer policy off (first lesson only): the other layers alone."""

    parts = (POLICY_OFF,)
    classmate = "policy-off-zz-honest-classmate"

    def test_without_the_policy_the_replay_alone_zeroes_attacks_on_the_verdict(self, graded):
        """Answers that patch what the kernel's checks use (torch.isclose, the assert helpers or
        their code) gain nothing: the kernel holds no expected value and judges nothing, the
        grader replays every check against the instructor's run. Each scores 0, and the grader
        names what was changed, before which cell."""
        for attack, changed in zip(REPLAY_ATTACKS, ("torch.isclose", "the notebook's assert_tensor_close",
                                                    "course_lib.grading.assert_tensor_close"), strict=True):
            result = graded["results"][f"policy-off-{attack}"]
            assert result.auto_score == 0.0, f"{attack} scored {result.auto_score}: the replay did not hold"
            named = [f for f in result.flags if "grading machinery changed" in f and changed in f]
            assert named, f"{attack}: no flag names {changed}: {result.flags}"

    def test_attacks_on_the_machine_and_the_batch_are_contained_and_flagged(self, graded):
        """With the policy off, only the sandbox and the grader stand between these and the
        machine: each scores 0, is flagged for what the sandbox stopped, and leaves no process
        behind."""
        if not SANDBOX:
            pytest.skip("the sandbox attacks need bwrap")
        attacks = {a: graded["results"][f"policy-off-{a}"] for a in subs.SANDBOX_ATTACKS}
        for attack, result in attacks.items():
            assert result.auto_score == 0.0, f"{attack}: scored {result.auto_score}"
            assert result.seconds < 60, f"{attack}: grading took {result.seconds:.0f} s"
        assert attacks["stdout-holding-daemon"].status == "graded", attacks["stdout-holding-daemon"].flags
        escape = graded["results"]["policy-off-escapes-through-numpy"]
        assert not (graded["root"] / "pwned-by-numpy").exists(), \
            "a submission wrote into the course folder: the sandbox did not hold"
        assert any(f.startswith("reached for a file") for f in escape.flags), \
            f"the refused write should be flagged, got {escape.flags}"
        for attack, expected_flag in (("stdout-holding-daemon", "left 1 process(es) running"),
                                      ("allocates-18-gb", "ran out of memory"),
                                      ("prints-500-mb", "printed more than"),
                                      ("kills-every-process", "the kernel died")):
            flags = attacks[attack].flags
            assert any(f.startswith(expected_flag) for f in flags), f"{attack}: expected a flag '{expected_flag}…', got {flags}"
        leftovers = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
                     if any(str(graded["root"]) in part for part in (p.info["cmdline"] or []))]
        assert leftovers == [], f"processes of the graded kernels survived: {leftovers[:3]}"
        printed = graded["root"] / "autograded" / "policy-off-prints-500-mb" / graded["lesson"]
        size = sum(f.stat().st_size for f in printed.rglob("*") if f.is_file())
        assert size < 50 * 2**20, f"the 500 MB print left {size / 2**20:.0f} MiB in autograded/"


    def _flags(self, graded, attack: str) -> list[str]:
        return graded["results"][f"policy-off-{attack}"].flags

    def test_records_that_are_not_files_or_not_the_recorders_are_refused_and_flagged(self, graded):
        """A FIFO among the records would block the grader forever; records the answer wrote
        itself carry a value no check can handle. Neither stops the batch, both are flagged,
        and the forger keeps only what its honest answer earns."""
        assert any("which is not a regular file" in f for f in self._flags(graded, "fifo-in-records")), \
            self._flags(graded, "fifo-in-records")
        assert any("not what the recorder writes" in f for f in self._flags(graded, "forges-records")), \
            self._flags(graded, "forges-records")

    def test_a_torch_function_the_tests_once_used_for_expected_values_is_patched_in_vain(self, graded):
        """The kernel no longer computes expected values, so patching torch.softmax changes no
        verdict: the wrong answer scores 0, and the patch is named."""
        assert graded["results"]["policy-off-patches-expected"].auto_score == 0.0
        flags = self._flags(graded, "patches-expected")
        assert any("grading machinery changed" in f and "torch.softmax" in f for f in flags), flags

    def test_filling_the_private_tmp_hits_its_limit_and_is_flagged(self, graded):
        flags = self._flags(graded, "fills-tmp")
        assert any(f.startswith("filled its private /tmp") for f in flags), flags

    def test_scripts_in_outputs_and_written_answers_never_reach_a_browser(self, graded):
        """The graded notebook (what the Formgrader renders) and the feedback hold no script, no
        event handler, no script link, whatever the markdown trick; the instructor is told what."""
        from grader import feedback
        from grader.sanitize import _markdown_to_html, unsafe_markup

        root, lesson, student = graded["root"], graded["lesson"], "policy-off-xss"
        flags = self._flags(graded, "xss")
        assert any("held HTML or scripts" in f and "onerror" in f for f in flags), flags
        nb = nbformat.read(root / "autograded" / student / lesson / f"{lesson}.ipynb", as_version=4)
        outputs = json.dumps([c.get("outputs", []) for c in nb.cells])
        assert "<script" not in outputs, "a script survived in the graded outputs"
        assert "onerror" not in outputs, "an event handler survived in the graded outputs"
        live = [unsafe_markup(_markdown_to_html(c.source)) for c in nb.cells if c.cell_type == "markdown"]
        assert not any(live), f"a markdown cell of the graded notebook renders live markup: {live}"
        written, failed = feedback.generate_feedback(root, [lesson], students=[student, self.classmate])
        assert failed == [], failed
        assert len(written) == 2, written
        html = (root / "feedback" / student / lesson / f"{lesson}.html").read_text()
        template = set(unsafe_markup((root / "feedback" / self.classmate / lesson
                                      / f"{lesson}.html").read_text()))
        assert [u for u in unsafe_markup(html) if u not in template] == [], "the feedback page renders live markup"
        assert "Content-Security-Policy" in html

    def test_no_later_cell_can_read_the_hidden_tests_back_from_the_kernel(self, graded):
        """After a hidden test cell, neither linecache nor the input history holds its source."""
        root, lesson = graded["root"], graded["lesson"]
        nb = nbformat.read(root / "autograded" / "policy-off-reads-hidden-source" / lesson / f"{lesson}.ipynb", as_version=4)
        printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "stream")
        assert "LEAK" in printed, "the attack did not run"
        leaked = [line for line in _hidden_lines(root, lesson) if line in printed]
        assert leaked == [], f"a later cell read hidden-test code back: {leaked[:3]}"


for _lesson in LESSONS:
    _wrong = _lesson in subs.WRONG_ANSWERS
    globals()[f"TestRoundTrip_{_lesson}"] = type(
        f"TestRoundTrip_{_lesson}", (RoundTripHonest, RoundTripCheats) + ((RoundTripWrong,) if _wrong else ()),
        {"lesson": _lesson, "parts": LESSON_PARTS if _wrong else (HONEST, CHEATS)})
# The attack parts test the grader, not a lesson: they run on the first lesson only.
TestRoundTripHostile = type("TestRoundTripHostile", (RoundTripHostile,), {"lesson": LESSONS[0]})
TestRoundTripPolicyOff = type("TestRoundTripPolicyOff", (RoundTripPolicyOff,), {"lesson": LESSONS[0]})
