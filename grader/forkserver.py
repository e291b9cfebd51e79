"""nbgrader's imports paid once per grading worker, not once per submission.

`python -m nbgrader autograde` spends about 3 s importing nbgrader, nbconvert, jupyter_client and
SQLAlchemy before it grades anything. A fork server imports them once and then forks one child per
submission: the child is a fresh process (its own session, working folder, environment, log file
and exit status), started as `python -m nbgrader ARGS` would be, but with its imports done. Nothing
of a submission reaches the server: it never runs a notebook, and each child is forked from the
server's state after its imports, before any submission was seen.

Protocol (one JSON object per line): the server says {"ready": true}; for each request
{"argv", "cwd", "env", "log"} it answers {"pid": N} and, when that child ends, {"exit": CODE}
(negative: killed by that signal). EOF on its input ends it.

`spawn(...)` is the grader's side: one server per worker thread, restarted if it dies. Set
GRADER_FORKSERVER=0 to run plain processes instead (as on systems without fork)."""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import subprocess
import sys
import threading
import time

PRELOAD = ("nbgrader.apps", "nbgrader.converters", "nbgrader.preprocessors", "nbgrader.api", "nbclient",
           "jupyter_client.manager", "nbconvert", "sqlalchemy", "grader.nbgrader_plugins", "grader.sanitize")
ENABLE_ENV = "GRADER_FORKSERVER"


def enabled() -> bool:
    return hasattr(os, "fork") and sys.platform == "linux" and os.environ.get(ENABLE_ENV, "1") != "0"


# ----- the server (python -m grader.forkserver)

def _child(request: dict, protocol_fd: int) -> None:
    """Become `python -m nbgrader ARGV` in a new session; never returns."""
    code = 1
    try:
        os.setsid()
        os.close(protocol_fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, 65536)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import tempfile

        tempfile.tempdir = None  # read TMPDIR again: the connection file goes to the submission's runtime
        sys.argv = ["nbgrader", *request["argv"]]
        sys.path[0] = request["cwd"]  # as `python -m` from that folder
        from nbgrader.apps.nbgraderapp import main

        main()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 (reported in the log, like an uncaught error of a process)
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def serve() -> None:
    protocol = os.dup(1)  # answers go here; stray prints of the imports go to stderr
    os.dup2(2, 1)
    for name in PRELOAD:
        importlib.import_module(name)

    def answer(message: dict) -> None:
        os.write(protocol, (json.dumps(message) + "\n").encode())

    answer({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request, protocol)
        answer({"pid": pid})
        _, status = os.waitpid(pid, 0)
        answer({"exit": os.waitstatus_to_exitcode(status)})


# ----- the grader's side

class ServerGone(RuntimeError):
    pass


class Server:
    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "grader.forkserver"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        self.buffer = b""
        atexit.register(self.close)
        if self.read(timeout=120) != {"ready": True}:
            raise ServerGone("the grader's fork server did not start")

    def read(self, timeout: float | None) -> dict | None:
        """The next message, or None if none came within `timeout` seconds."""
        end = None if timeout is None else time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            left = None if end is None else max(0.0, end - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise ServerGone("the grader's fork server ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def spawn(self, argv: list[str], cwd: str, env: dict[str, str], log: str) -> Child:
        self.process.stdin.write((json.dumps({"argv": argv, "cwd": cwd, "env": env, "log": log}) + "\n").encode())
        self.process.stdin.flush()
        message = self.read(timeout=60)
        if not message or "pid" not in message:
            raise ServerGone(f"the grader's fork server answered {message!r} to a new submission")
        return Child(self, message["pid"])

    def close(self) -> None:
        if self.process.poll() is not None:
            return
        try:
            self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()


class Child:
    """What `subprocess.Popen` gives for one nbgrader process: pid, wait(timeout), returncode."""

    def __init__(self, server: Server, pid: int) -> None:
        self.server, self.pid, self.returncode = server, pid, None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            message = self.server.read(timeout)
            if message is None:
                raise subprocess.TimeoutExpired(f"nbgrader (pid {self.pid})", timeout)
            self.returncode = message["exit"]
        return self.returncode


_local = threading.local()


def start() -> None:
    """Start this thread's server now (it takes a few seconds), if it is not running."""
    server = getattr(_local, "server", None)
    if server is None or server.process.poll() is not None:
        _local.server = Server()


def spawn(argv: list[str], cwd: str, env: dict[str, str], log: str) -> Child:
    """Start `nbgrader ARGV` from this thread's fork server (started on first use)."""
    start()
    server = _local.server
    try:
        return server.spawn(argv, cwd, env, log)
    except (ServerGone, OSError):  # it died between submissions: one new try
        discard()
        _local.server = Server()
        return _local.server.spawn(argv, cwd, env, log)


def discard() -> None:
    """Stop this thread's server (one whose child could not be reaped); the next spawn starts another."""
    server = getattr(_local, "server", None)
    _local.server = None
    if server is not None:
        server.process.kill()
        server.process.wait()


if __name__ == "__main__":
    serve()
