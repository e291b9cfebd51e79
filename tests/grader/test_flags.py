"""grader/flags.py: what the sandbox stopped, told by kind; failing answers are not mistaken for attacks."""

from __future__ import annotations

import nbformat

from grader import flags


def _graded(path, outputs_by_cell):
    """A graded notebook whose code cells carry the given outputs."""

    nb = nbformat.v4.new_notebook()
    for source, outputs in outputs_by_cell:
        cell = nbformat.v4.new_code_cell(source)
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        nb.cells.append(cell)
    nbformat.write(nb, path)
    return path


def _error(ename, evalue):
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": []}


def test_what_the_sandbox_stopped_is_flagged_by_kind(tmp_path):
    graded = _graded(tmp_path / "graded.ipynb", [
        ("hoard = torch.empty(18 * 2**30)", [_error(
            "RuntimeError", "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")]),
        ("x = bytearray(10**12)", [_error("MemoryError", "")]),
        ("np.array([1]).tofile('/course/pwned')", [_error("FileNotFoundError",
                                                          "[Errno 2] No such file or directory: '/course/pwned'")]),
        ("np.zeros(10**8).tofile('big')", [_error("OSError", "800000000 requested and 67108864 written")]),
        ("socket.create_connection(('example.org', 80))", [_error("gaierror",
                                                                 "[Errno -3] Temporary failure in name resolution")]),
        ("print('x' * 10**9)", [{"output_type": "stream", "name": "stdout",
                                  "text": "xxxx\n[output cut by the grader after 16,777,216 characters]\n"}]),
    ])
    found = flags.contained_flags(graded, ["pid 4321: a fork of the kernel"])
    assert len(found) == 6, f"expected one flag per kind (memory, files, limits, network, output, processes): {found}"
    memory, files, limits, network, output, left = found
    assert memory.startswith("ran out of memory"), memory
    assert all(f"cell {i}" in memory for i in (0, 1)), f"both out-of-memory cells should be named: {memory}"
    assert files.startswith("reached for a file"), files
    assert "cell 2" in files, files
    assert "FileNotFoundError" in files, files
    assert limits.startswith("hit the sandbox's limit"), limits
    assert "cell 3" in limits, limits
    assert network.startswith("tried to use the network"), network
    assert "cell 4" in network, network
    assert output.startswith("printed more than"), output
    assert "cell 5" in output, output
    assert left.startswith("left 1 process(es) running"), left
    assert "4321" in left, left
    unsandboxed = flags.contained_flags(graded, ["pid 4321: a fork of the kernel"], sandboxed=False)
    assert "graded without the sandbox" in unsandboxed[0], unsandboxed[0]
    assert "the grader killed" in unsandboxed[-1], unsandboxed[-1]


def test_failing_answers_and_tests_are_not_mistaken_for_contained_attacks(tmp_path):
    """An unanswered or wrong submission fails with ordinary errors, and a relative path that
    does not exist is a typo, not an attack: no flag."""
    graded = _graded(tmp_path / "graded.ipynb", [
        ("def f(x):\n    raise NotImplementedError()", []),
        ("f(1)", [_error("NotImplementedError", "")]),
        ("assert_equal(f(1), expect=lambda: 2)", [_error("AssertionError", "f(1): expected 2, got 3")]),
        ("open('dat.txt')", [_error("FileNotFoundError", "[Errno 2] No such file or directory: 'dat.txt'")]),
        ("print('done')", [{"output_type": "stream", "name": "stdout", "text": "done\n"}]),
    ])
    assert flags.contained_flags(graded, []) == []


def test_the_kernels_cause_of_death_is_reported_not_guessed():
    log = "[AutogradeApp | ERROR] Kernel died\nbwrap: execvp /work/other/.venv/bin/python: No such file or directory\n"
    reason = flags.failure_reason("autograde error", 600, log)
    assert "bwrap: execvp /work/other/.venv/bin/python: No such file or directory" in reason
    assert "out of memory" not in reason
