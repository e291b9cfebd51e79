"""Grading kernels in a bubblewrap sandbox.

`grader/processes.py` points nbgrader at a kernel spec whose command is this file:

    python grader/sandbox.py -f CONNECTION_FILE --course COURSE_DIR

It sets resource limits and then execs `bwrap`, which starts the IPython kernel with:

- its own PID, network, IPC, UTS and cgroup namespaces (and user namespace, unless grading as
  root), the uid 65534 and no capabilities; as root the kernel is the real uid 65534 outside
  too (through `setpriv`), so that the process limit applies to it; it dies with its parent,
  and everything it started dies with it (killing the PID namespace's first process kills
  them all, double-forked daemons included);
- read-only binds of the OS (/usr, /etc, ...), the interpreter, the virtual environment (at
  its own path and, when it is a symlink, at its target's), the data folder, and the graded
  course's `course_lib` at /opt/grading/course_lib, first on the kernel's path: grading uses the
  course_lib of the course being graded, even when the venv's editable install points at
  another checkout. Nothing else of the course: no gradebook.db, solutions/, submitted/,
  autograded/, feedback/, .git or home;
- a private /tmp of bounded size, an empty working directory, and a cleared environment;
- limits on address space, processes, file size, open files and output (printed and rich),
  and, where the grader may create cgroups (as root, as in CI), a memory cgroup that bounds the
  whole process tree (forks included; a tmpfs's pages count too).

The kernel talks to nbgrader over Unix sockets (jupyter's "ipc" transport) in a per-submission
runtime folder, the one writable bind, because its network namespace has no shared loopback.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from course_lib.grading_env import (
    GRADING_ENV,
    OUTPUT_LIMIT_ENV,
    RECORD_ENV,
    SANDBOX_DIR,
    SEED_ENV,
    WITHHOLD_ENV,
)

ROOT = Path(__file__).resolve().parent.parent
KERNEL_NAME = "llm-course-sandbox"
LIMITS = {  # (soft = hard) per kernel; override with LLM_SANDBOX_<NAME> environment variables
    "MEMORY_BYTES": 8 * 2**30,  # address space; torch reserves some virtual memory up front
    "PROCESSES": 256,  # RLIMIT_NPROC counts per uid: the sandbox's own uid
    "FILE_BYTES": 64 * 2**20,  # the largest file the kernel may write (in its private /tmp)
    "OPEN_FILES": 1024,
    "OUTPUT_CHARS": 16 * 2**20,  # printed by one kernel (grader/kernel_output_limit.py)
    "TMP_BYTES": 1 * 2**30,  # the private /tmp (a tmpfs, in the host's memory)
    "RUNTIME_BYTES": 256 * 2**20,  # the runtime folder on the grader's disk (records, sockets)
    "TREE_MEMORY_BYTES": 8 * 2**30,  # the whole process tree, where a memory cgroup is available
}
CGROUP_FILE = ".cgroup"  # in the runtime folder: the cgroup the launcher made, for the grader to read and remove
CGROUP_PREFIX = "llm-grading-"
COURSE_LIB_MOUNT = Path(SANDBOX_DIR) / "course_lib"
SANDBOX_UID = 65534
OUTPUT_LIMIT_MODULE = Path(__file__).resolve().parent / "kernel_output_limit.py"
RUNTIME_MARKER = ".sandbox-runtime"


def runtime_dir(path: Path) -> Path:
    """A fresh, empty folder for one kernel's connection file and sockets: the only folder the
    sandbox may write to. Run nbgrader with TMPDIR set to it (jupyter puts the connection file
    in the temporary folder)."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    path.chmod(0o777)  # the sandbox's uid creates its sockets here
    (path / RUNTIME_MARKER).touch()
    return path


def short_runtime_dir() -> Path:
    """A fresh runtime folder under the system's temporary folder: Unix socket paths must fit in
    107 bytes, which a course folder's own subfolders may not."""
    import tempfile

    return runtime_dir(Path(tempfile.mkdtemp(prefix="llm-grading-")))


def bwrap_path() -> str | None:
    """The bwrap binary, if it is installed and can create namespaces on this machine."""
    path = shutil.which("bwrap")
    if path is None:
        return None
    probe = subprocess.run([path, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent",
                            "--uid", str(SANDBOX_UID), "--", "/bin/true"], capture_output=True, check=False)
    return path if probe.returncode == 0 else None


def limit(name: str) -> int:
    return int(os.environ.get(f"LLM_SANDBOX_{name}", LIMITS[name]))


def _set_limits() -> None:
    for rlimit, name in ((resource.RLIMIT_AS, "MEMORY_BYTES"), (resource.RLIMIT_NPROC, "PROCESSES"),
                         (resource.RLIMIT_FSIZE, "FILE_BYTES"), (resource.RLIMIT_NOFILE, "OPEN_FILES")):
        value = limit(name)
        resource.setrlimit(rlimit, (value, value))


def data_dir(course: Path | None = None) -> Path:
    """The folder a grading kernel reads the data sets from (read-only): $COURSE_DATA_DIR if set,
    else the first of the course's data/ and the user cache (`course_lib.data.cache_dir()`) that
    holds a corpus file, else the cache."""
    if os.environ.get("COURSE_DATA_DIR"):
        return Path(os.environ["COURSE_DATA_DIR"]).resolve()
    from course_lib.data import CORPORA, cache_dir

    folders = [(course or ROOT) / "data", cache_dir()]
    for folder in folders:
        if any((folder / corpus.filename).is_file() for corpus in CORPORA.values()):
            return folder.resolve()
    return cache_dir().resolve()


def _read_only_binds(course: Path | None = None) -> list[tuple[Path, Path]]:
    """What the kernel may read, as (source, destination): the OS, the interpreter, the venv and
    the data (`data_dir(course)`), each at its real path and, where it is reached through a symlink (a symlinked
    .venv, say), at that path too, so that sys.executable and sys.prefix work inside."""
    binds = [Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc") if not Path(p).is_symlink()]
    binds += [Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).parent, data_dir(course)]
    pairs: dict[Path, Path] = {}  # destination -> source
    for path in binds:
        if path.exists():
            real = path.resolve()
            pairs.setdefault(real, real)
            pairs.setdefault(Path(os.path.abspath(path)), real)
    return sorted(((source, destination) for destination, source in pairs.items()), key=lambda b: len(b[1].parts))


def bwrap_command(connection_file: Path, bwrap: str = "bwrap", as_root: bool | None = None,
                  course: Path | None = None, program: list[str] | None = None) -> list[str]:
    """The bwrap command line.

    As an ordinary user, bwrap makes a user namespace in which the kernel has the uid 65534. As
    root, that uid would still be root outside, which Linux exempts from the process limit; so
    bwrap runs privileged without a user namespace, and `setpriv` makes the kernel the real uid
    65534, with no capabilities and no way to gain any (no_new_privs).

    `course` is the course directory whose course_lib the kernel imports (default: this
    checkout); `program` replaces the kernel (the pre-check runs `python -c ...` this way)."""
    as_root = os.geteuid() == 0 if as_root is None else as_root
    runtime = connection_file.resolve().parent
    course_lib = ((course or ROOT) / "course_lib").resolve()
    binds = _read_only_binds(course)
    command = [bwrap, "--die-with-parent", "--new-session"]
    if as_root:
        command += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        command += ["--unshare-all", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL"]
    command += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(limit("TMP_BYTES")), "--tmpfs", "/tmp",
                "--perms", "0777" if as_root else "0700", "--dir", "/tmp/work"]
    if as_root:  # bwrap makes the folders above a bind 0700 and root's: open them to the kernel's uid
        destinations = [*(d for _, d in binds), runtime, COURSE_LIB_MOUNT]
        ancestors = sorted({a for d in destinations for a in d.parents if a not in (Path("/"), Path("/tmp"))},
                           key=lambda a: len(a.parts))
        for ancestor in ancestors:
            command += ["--perms", "0755", "--dir", str(ancestor)]
    for source, destination in binds:
        command += ["--ro-bind", str(source), str(destination)]
    for link in ("/bin", "/sbin", "/lib", "/lib64"):
        if Path(link).is_symlink():  # merged-/usr systems: the same links inside
            command += ["--symlink", os.readlink(link), link]
    command += ["--ro-bind", str(OUTPUT_LIMIT_MODULE), f"{SANDBOX_DIR}/{OUTPUT_LIMIT_MODULE.name}"]
    if course_lib.is_dir():
        command += ["--ro-bind", str(course_lib), str(COURSE_LIB_MOUNT)]
    command += ["--bind", str(runtime), str(runtime), "--chdir", "/tmp/work", "--clearenv"]
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
           "MPLCONFIGDIR": "/tmp", "PYTHONNOUSERSITE": "1", "COURSE_DATA_DIR": str(data_dir(course)),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONPATH": SANDBOX_DIR,
           OUTPUT_LIMIT_ENV: str(limit("OUTPUT_CHARS")), GRADING_ENV: "1"}
    record = os.environ.get(RECORD_ENV)  # where the checks are recorded (grader/verdicts.py)
    if record and Path(record).resolve().is_relative_to(runtime):
        env[RECORD_ENV] = str(Path(record).resolve())
    for key in (WITHHOLD_ENV, SEED_ENV):  # course_lib/grading.py
        if os.environ.get(key):
            env[key] = os.environ[key]
    for key, value in env.items():
        command += ["--setenv", key, value]
    command.append("--")
    if as_root:
        command += [shutil.which("setpriv") or "/usr/bin/setpriv", "--reuid", str(SANDBOX_UID), "--regid",
                    str(SANDBOX_UID), "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    if program is not None:
        return command + program
    return command + [sys.executable, "-m", "ipykernel_launcher", "-f", str(connection_file),
                      f"--IPKernelApp.outstream_class={OUTPUT_LIMIT_MODULE.stem}.LimitedOutStream",
                      f"--IPKernelApp.extensions={OUTPUT_LIMIT_MODULE.stem}"]


def connect_through(kernel_manager, runtime: Path):
    """Point a jupyter kernel manager at `runtime` (a folder from runtime_dir()): the kernel's
    connection file and Unix sockets go there, the one folder the sandbox binds writable.
    Returns the manager. nbgrader takes the same settings from `nbgrader_options`."""
    kernel_manager.transport, kernel_manager.ip = "ipc", str(runtime / "kernel")
    kernel_manager.connection_file = str(runtime / "kernel.json")
    return kernel_manager


def nbgrader_options(runtime: Path) -> list[str]:
    """nbgrader's command-line options for a sandboxed kernel in `runtime` (see connect_through;
    nbgrader names the connection file itself, in TMPDIR, which must be set to `runtime`)."""
    return [f"--Execute.kernel_name={KERNEL_NAME}", "--KernelManager.transport=ipc",
            f"--KernelManager.ip={runtime / 'kernel'}"]


def write_kernel_spec(folder: Path, course: Path | None = None) -> Path:
    """A kernel spec (under folder/kernels/) whose kernels run in the sandbox with the
    course_lib of `course` (default: this checkout); returns folder.

    Point JUPYTER_PATH at the folder to make it visible to nbgrader.
    """
    spec_dir = folder / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, str(Path(__file__).resolve()), "-f", "{connection_file}",
                     "--course", str((course or ROOT).resolve())],
            "display_name": "LLM internals (grading sandbox)", "language": "python"}
    # atomically: submissions graded in parallel write the same spec
    fd, tmp = tempfile.mkstemp(dir=spec_dir, prefix=".kernel-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(spec, indent=1))
    os.chmod(tmp, 0o644)
    os.replace(tmp, spec_dir / "kernel.json")
    return folder


# --- a memory cgroup for the whole process tree (where the grader may make one) ---------------


def _own_memory_cgroup() -> tuple[Path, str] | None:
    """(folder of this process's memory cgroup, "v1" or "v2"), or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            return Path("/sys/fs/cgroup") / path.lstrip("/"), "v2"
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/"), "v1"
    return None


def enter_memory_cgroup(runtime: Path) -> Path | None:
    """Put this process (the launcher, before it execs bwrap) in a new memory cgroup limited to
    TREE_MEMORY_BYTES, so that the kernel and everything it starts share one limit; its path goes
    to runtime/.cgroup for the grader. None where no cgroup can be made (not root, no memory
    controller, a cgroup v2 tree that does not delegate it): the per-process limits still hold."""
    found = _own_memory_cgroup()
    if found is None or os.geteuid() != 0:
        return None
    base, version = found
    group = base / f"{CGROUP_PREFIX}{os.getpid()}"
    try:
        group.mkdir()
        if version == "v2":
            (group / "memory.max").write_text(str(limit("TREE_MEMORY_BYTES")))
            if (group / "memory.swap.max").exists():
                (group / "memory.swap.max").write_text("0")
        else:
            (group / "memory.limit_in_bytes").write_text(str(limit("TREE_MEMORY_BYTES")))
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        try:
            group.rmdir()
        except OSError:
            pass
        return None
    (runtime / CGROUP_FILE).write_text(str(group))
    return group


def memory_cgroup_hit(runtime: Path) -> bool | None:
    """After a grading: whether the process tree reached its cgroup's memory limit (None without
    a cgroup). Removes the cgroup. The path is read from the runtime folder, which the kernel
    could write, so only a folder named like ours in a memory cgroup tree is trusted."""
    try:
        text = (runtime / CGROUP_FILE).read_text()[:4096].strip()
    except OSError:
        return None
    group = Path(text)
    if not (group.name.startswith(CGROUP_PREFIX) and group.is_absolute() and ".." not in group.parts
            and group.is_relative_to("/sys/fs/cgroup") and group.is_dir()):
        return None
    hit = False
    try:
        if (group / "memory.events").exists():  # v2
            events = dict(line.split() for line in (group / "memory.events").read_text().splitlines())
            hit = int(events.get("max", 0)) > 0 or int(events.get("oom_kill", 0)) > 0
        elif (group / "memory.failcnt").exists():  # v1
            hit = int((group / "memory.failcnt").read_text()) > 0
    except (OSError, ValueError):
        pass
    for _ in range(50):  # the tree was just killed; its last processes may still be exiting
        try:
            group.rmdir()
            break
        except OSError:
            time.sleep(0.1)
    return hit


def probe(course: Path, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `python -c code` in the sandbox a kernel would get for `course` (same binds, same
    environment, same limits), without a kernel; for the grader's pre-check."""
    runtime = short_runtime_dir()
    try:
        command = bwrap_command(runtime / "kernel.json", bwrap_path() or "bwrap", course=course,
                                program=[sys.executable, "-c", code])
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False,
                              preexec_fn=_set_limits)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 4) or argv[0] != "-f" or (len(argv) == 4 and argv[2] != "--course"):
        sys.exit("usage: python grader/sandbox.py -f CONNECTION_FILE [--course COURSE_DIR]")
    bwrap = bwrap_path()
    if bwrap is None:
        sys.exit("bubblewrap (bwrap) is not installed or cannot create namespaces here: "
                 "install it (Debian: apt install bubblewrap)")
    connection_file = Path(argv[1]).resolve()
    course = Path(argv[3]) if len(argv) == 4 else None
    if not (connection_file.parent / RUNTIME_MARKER).exists():
        sys.exit(f"{connection_file} is not in a folder made by grader/sandbox.runtime_dir(): the "
                 "sandbox binds that folder writable, so it must hold nothing else")
    command = bwrap_command(connection_file, bwrap, course=course)
    if os.geteuid() == 0:
        os.chown(connection_file, SANDBOX_UID, SANDBOX_UID)  # the kernel reads it as uid 65534
    enter_memory_cgroup(connection_file.parent)
    _set_limits()
    os.execv(bwrap, command)


if __name__ == "__main__":
    main(sys.argv[1:])
