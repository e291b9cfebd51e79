"""The grading sandbox (grader/sandbox.py): a kernel that sees only what it needs.

Each test starts a real kernel through the sandbox's kernel spec, the way nbgrader does when
grader/autograde.py grades, and checks one property from inside it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from grader import sandbox

pytestmark = pytest.mark.skipif(sandbox.bwrap_path() is None and os.environ.get("REQUIRE_SANDBOX") != "1",
                                reason="bubblewrap is not installed here (Debian: apt install bubblewrap)")
ROOT = Path(__file__).resolve().parents[2]


def _sandboxed_kernel(tmp_path_factory, monkeypatch_module):
    from jupyter_client.manager import KernelManager

    base = tmp_path_factory.mktemp("sandbox")
    runtime = sandbox.runtime_dir(base / "runtime")
    monkeypatch_module.setenv("JUPYTER_PATH", str(sandbox.write_kernel_spec(base / "jupyter")))
    monkeypatch_module.setenv("LLM_SANDBOX_MEMORY_BYTES", str(4 * 2**30))
    monkeypatch_module.setenv("LLM_SANDBOX_OUTPUT_CHARS", "100000")
    km = sandbox.connect_through(KernelManager(kernel_name=sandbox.KERNEL_NAME), runtime)
    km.start_kernel()
    client = km.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)

    def run(code: str) -> str:
        """What the code printed, with each rich output as '<mime type: N characters>'."""
        chunks = []

        def keep(message):
            content = message["content"]
            if message["msg_type"] == "stream":
                chunks.append(content["text"])
            elif message["msg_type"] == "error":
                chunks.append(f"{content['ename']}: {content['evalue']}")
            elif message["msg_type"] in ("display_data", "execute_result"):
                for mime, value in content["data"].items():
                    chunks.append(value if mime == "text/plain" and "output cut" in value else f"<{mime}: {len(value)} characters>")

        client.execute_interactive(code, timeout=60, output_hook=keep)
        return "".join(chunks).strip()

    yield run
    client.stop_channels()
    km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, monkeypatch_module):
    yield from _sandboxed_kernel(tmp_path_factory, monkeypatch_module)


@pytest.fixture
def fresh_kernel(tmp_path_factory, monkeypatch_module):
    """A kernel of its own, with its whole output budget."""
    yield from _sandboxed_kernel(tmp_path_factory, monkeypatch_module)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_the_kernel_runs_as_an_unprivileged_user_and_can_use_the_course(kernel):
    out = kernel("import os, torch\nfrom course_lib.data import load_text\n"
                 "print(os.getuid(), len(load_text('tinyshakespeare')) > 1_000_000)")
    assert out == f"{sandbox.SANDBOX_UID} True"


def test_course_files_other_than_course_lib_do_not_exist_inside(kernel):
    paths = [ROOT / name for name in ("gradebook.db", "solutions", "submitted", "autograded", ".git")]
    paths.append(Path.home() / ".bash_history")
    out = kernel(f"import os\nprint([os.path.exists(p) for p in {[str(p) for p in paths]!r}])")
    assert out == str([False] * len(paths))


def test_course_lib_is_the_courses_read_only_and_the_network_is_gone(kernel):
    """The kernel imports the graded course's course_lib (bound at /opt/grading/course_lib, first
    on its path), cannot write it, and has no network."""
    out = kernel(
        "import os, socket, course_lib\n"
        "print(os.path.dirname(course_lib.__file__))\n"
        "try:\n"
        "    open(os.path.join(os.path.dirname(course_lib.__file__), 'pwned.py'), 'w')\n"
        "except OSError as e:\n"
        "    print('refused')\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
        "except OSError as e:\n"
        "    print('no network')\n")
    assert out.splitlines() == [str(sandbox.COURSE_LIB_MOUNT), "refused", "no network"]
    assert not (ROOT / "course_lib" / "pwned.py").exists()


def test_memory_and_file_size_are_limited(kernel):
    out = kernel(
        "try:\n"
        "    block = bytearray(6 * 2**30)\n"
        "except MemoryError:\n"
        "    print('MemoryError')\n"
        "try:\n"
        "    with open('/tmp/big', 'wb') as f:\n"
        "        f.write(b'0' * (65 * 2**20))\n"
        "except OSError as e:\n"
        "    print('file too large')\n")
    assert out.splitlines() == ["MemoryError", "file too large"]


def test_the_environment_is_cleared(kernel):
    os.environ["GRADER_SECRET"] = "1"
    out = kernel("import os\nprint('GRADER_SECRET' in os.environ, os.environ['HOME'])")
    assert out == "False /tmp"


def test_the_launcher_refuses_a_connection_file_outside_a_runtime_folder(tmp_path):
    import subprocess
    import sys

    (tmp_path / "kernel.json").write_text("{}")
    done = subprocess.run([sys.executable, str(ROOT / "grader" / "sandbox.py"), "-f", str(tmp_path / "kernel.json")],
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "runtime_dir" in done.stderr


def test_the_number_of_processes_is_limited(kernel):
    """RLIMIT_NPROC counts the processes and threads of the kernel's real uid, and Linux exempts
    root: a launcher started as root must have made the kernel the real uid 65534 for this to
    hold. The fork loop runs in a plain Python child of the kernel (forking the kernel itself
    would copy its ZeroMQ threads)."""
    fork_loop = (
        "import os, time\n"
        "children = []\n"
        "try:\n"
        "    for _ in range(400):\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        children.append(pid)\n"
        "    print('forked', len(children))\n"
        "except OSError as error:\n"
        "    print('refused after', len(children), type(error).__name__)\n"
        "finally:\n"
        "    for pid in children:\n"
        "        os.kill(pid, 9)\n"
        "        os.waitpid(pid, 0)\n"
    )
    out = kernel(f"import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', {fork_loop!r}], "
                 "capture_output=True, text=True, timeout=60).stdout)")
    assert out.startswith("refused after"), f"400 forks were allowed: {out!r}"
    assert int(out.split()[2]) < sandbox.LIMITS["PROCESSES"], out


def test_printed_output_is_cut_after_the_limit(kernel):
    # last of the shared kernel's tests: it spends that kernel's output budget
    out = kernel("for _ in range(50):\n    print('x' * 10_000)")
    assert "[output cut by the grader after 100,000 characters]" in out
    assert len(out) < 100_000 + 200, f"{len(out):,} characters came through a 100,000-character limit"


def test_as_root_the_kernel_is_started_as_the_real_sandbox_uid(tmp_path):
    """Root gets no user namespace (its uid 65534 would still be root outside) but setpriv, with
    no capabilities and no_new_privs; an ordinary user gets the user namespace."""
    runtime = sandbox.runtime_dir(tmp_path / "runtime")
    as_root = sandbox.bwrap_command(runtime / "kernel.json", as_root=True)
    as_user = sandbox.bwrap_command(runtime / "kernel.json", as_root=False)
    tail = as_root[as_root.index("--") + 1:]
    assert Path(tail[0]).name == "setpriv"
    assert tail[1:5] == ["--reuid", str(sandbox.SANDBOX_UID), "--regid", str(sandbox.SANDBOX_UID)]
    assert {"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--clear-groups"} <= set(tail)
    assert "--unshare-all" not in as_root
    assert "--unshare-pid" in as_root
    assert "--unshare-net" in as_root
    assert "--unshare-all" in as_user
    assert "--cap-drop" in as_user
    assert "setpriv" not in " ".join(as_user)


def test_rich_outputs_count_against_the_same_limit(fresh_kernel):
    out = fresh_kernel("from IPython.display import HTML, display\n"
                       "for _ in range(30):\n    display(HTML('<b>' + 'y' * 10_000 + '</b>'))\n"
                       "HTML('z' * 50_000)")
    shown = out.count("<text/html: ")
    assert "[output cut by the grader after 100,000 characters]" in out, out[-300:]
    assert 1 <= shown <= 10, f"{shown} HTML outputs of 10,000 characters came through a 100,000-character limit"
    assert "<text/html: 50000" not in out, "the cell's result went out after the limit"
    assert fresh_kernel("print('after')") == "", "printing must stay cut once rich outputs spent the budget"


def test_the_grader_sees_what_a_kernel_left_running_even_disguised_as_bwrap(fresh_kernel):
    """tools/autograde.ProcessWatch tells the sandbox's own processes (bwrap, bwrap, the kernel)
    from the submission's by their place in the tree, not by name: a double-forked daemon and a
    process named `bwrap` that the kernel started are both the submission's."""
    import psutil

    from grader.processes import ProcessWatch

    out = fresh_kernel(
        "import os, subprocess, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execv('/usr/bin/sleep', ['sleep', '601'])\n"
        "    os._exit(0)\n"
        "os.symlink(sys.executable, '/tmp/bwrap')\n"
        "subprocess.Popen(['/tmp/bwrap', '-c', 'import time; time.sleep(602)'])\n"
        "time.sleep(1)\n"
        "print('started')\n")
    assert out == "started", out
    kernels, others = ProcessWatch.classify(psutil.Process(os.getpid()))
    try:
        assert len(kernels) >= 1, f"no sandboxed kernel found below the test process: {others}"
        assert any("sleep 601" in o for o in others), f"the double-forked daemon was not seen: {others}"
        assert any("time.sleep(602)" in o for o in others), f"the process named bwrap was not seen: {others}"
        assert not any(o.endswith("the kernel") for o in others), others
    finally:
        for description in others:
            psutil.Process(int(description.split(":")[0].split()[1])).kill()




def test_a_symlinked_venv_is_bound_at_its_own_path_and_at_its_target(tmp_path, monkeypatch):
    real = tmp_path / "real-venv"
    (real / "bin").mkdir(parents=True)
    link = tmp_path / "checkout" / ".venv"
    link.parent.mkdir()
    link.symlink_to(real)
    monkeypatch.setattr(sys, "prefix", str(link))
    monkeypatch.setattr(sys, "executable", str(link / "bin" / "python"))
    binds = dict((str(d), str(s)) for s, d in sandbox._read_only_binds())
    assert binds.get(str(link)) == str(real.resolve()), binds
    assert binds.get(str(real.resolve())) == str(real.resolve())


def test_a_cgroup_path_from_the_runtime_folder_is_trusted_only_if_it_is_ours(tmp_path):
    (tmp_path / sandbox.CGROUP_FILE).write_text("/etc")
    assert sandbox.memory_cgroup_hit(tmp_path) is None
    assert Path("/etc").exists()
    (tmp_path / sandbox.CGROUP_FILE).write_text("/sys/fs/cgroup/memory/../../../etc/llm-grading-1")
    assert sandbox.memory_cgroup_hit(tmp_path) is None


@pytest.mark.skipif(os.geteuid() != 0 or sandbox._own_memory_cgroup() is None, reason="needs root and a memory cgroup")
def test_the_memory_cgroup_bounds_the_whole_tree_and_is_removed(tmp_path):
    import subprocess

    runtime = sandbox.runtime_dir(tmp_path / "runtime")
    code = ("import os, sys; sys.path.insert(0, {root!r}); from grader import sandbox; from pathlib import Path; "
            "g = sandbox.enter_memory_cgroup(Path({runtime!r})); print(g)").format(root=str(ROOT), runtime=str(runtime))
    env = {**os.environ, "LLM_SANDBOX_TREE_MEMORY_BYTES": str(256 * 2**20)}
    done = subprocess.run([sys.executable, "-c", code + "; x = bytearray(600 * 2**20)"], env=env,
                          capture_output=True, text=True, check=False)
    first = (done.stdout.strip().splitlines() or ["None"])[0]
    if first == "None":
        pytest.skip(f"no memory cgroup can be made here (a cgroup v2 tree that does not delegate memory?): {done.stderr[-200:]}")
    group = Path(first)
    assert group.name.startswith(sandbox.CGROUP_PREFIX), done.stdout + done.stderr
    assert done.returncode != 0, "600 MiB in a 256 MiB cgroup should have been killed"
    assert sandbox.memory_cgroup_hit(runtime) is True
    assert not group.exists(), "the grader removes the cgroup it read"
