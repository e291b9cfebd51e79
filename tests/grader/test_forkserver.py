"""grader/forkserver.py: each submission's nbgrader is a fresh process with the request's folder,
environment and log, in its own session, forked from a server that never runs a submission."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grader import forkserver

pytestmark = pytest.mark.skipif(not forkserver.enabled(), reason="the fork server needs Linux and fork")

# nbgrader executes the working folder's nbgrader_config.py in the child: it reports what it sees.
REPORTING_CONFIG = """\
import json, os, tempfile
json.dump({"pid": os.getpid(), "sid": os.getsid(0), "cwd": os.getcwd(), "x": os.environ.get("X"),
           "home": os.environ.get("HOME"), "tmp": tempfile.gettempdir()}, open("seen.json", "w"))
if os.environ.get("X") == "exit":
    raise SystemExit(3)
c = get_config()
"""


def _spawn(folder: Path, x: str, tmp: Path) -> tuple[forkserver.Child, Path]:
    log = folder / f"log-{x}"
    log.touch()
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "X": x, "TMPDIR": str(tmp)}
    return forkserver.spawn(["db", "student", "list"], str(folder), env, str(log)), log


def test_each_child_is_a_fresh_process_with_the_request_s_folder_environment_and_temporary_folder(tmp_path):
    (tmp_path / "nbgrader_config.py").write_text(REPORTING_CONFIG)
    seen = []
    for x in ("one", "two"):
        tmp = tmp_path / f"tmp-{x}"
        tmp.mkdir()
        child, log = _spawn(tmp_path, x, tmp)
        assert child.wait(timeout=120) == 0, f"nbgrader db student list failed:\n{log.read_text()[-2000:]}"
        seen.append(json.loads((tmp_path / "seen.json").read_text()))
        assert seen[-1]["pid"] == child.pid
        assert seen[-1]["sid"] == child.pid, "the child is not in a session of its own"
        assert (seen[-1]["cwd"], seen[-1]["x"], seen[-1]["tmp"]) == (str(tmp_path), x, str(tmp))
        assert seen[-1]["home"] is None, "the server's environment leaked into the child"
    server = forkserver._local.server.process.pid
    assert len({s["pid"] for s in seen} | {server}) == 3, f"a process was reused: {seen}, server {server}"


def test_an_exit_status_and_a_kill_reach_the_grader(tmp_path):
    (tmp_path / "nbgrader_config.py").write_text(REPORTING_CONFIG)
    child, _ = _spawn(tmp_path, "exit", tmp_path)
    assert child.wait(timeout=120) != 0
    (tmp_path / "nbgrader_config.py").write_text("import time\ntime.sleep(60)\nc = get_config()\n")
    child, _ = _spawn(tmp_path, "sleeps", tmp_path)
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.5)
    os.kill(child.pid, 9)
    assert child.wait(timeout=30) == -9


def test_each_thread_has_its_own_server(tmp_path):
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    servers = []

    def grade() -> None:
        child, _ = _spawn(tmp_path, "thread", tmp_path)
        child.wait(timeout=120)
        servers.append(forkserver._local.server.process.pid)
        forkserver.discard()

    threads = [threading.Thread(target=grade) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(servers)) == 2
