"""Where a batch's submissions run: here one at a time, this machine's processes, or a Dask cluster;
and how the batch shows its progress."""

from __future__ import annotations

import contextlib
import os
import sys
import time

import psutil

from grader import sandbox


def default_jobs() -> int:
    """Submissions graded at once by default: one per core, but no more than the machine's memory
    holds if every sandbox used its whole memory limit (TREE_MEMORY_BYTES, 8 GiB), and at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    memory = psutil.virtual_memory().total // sandbox.limit("TREE_MEMORY_BYTES")
    return max(1, min(cores, memory))


def warm_worker() -> None:
    """A worker's fixed costs, paid while the batch is set up: the grader's imports and its fork
    server (grader/forkserver.py). A failure here only leaves them for the first submission."""
    with contextlib.suppress(Exception):
        from grader import forkserver, submission  # noqa: F401

        if forkserver.enabled():
            forkserver.start()


@contextlib.contextmanager
def engine_pool(engine: str, jobs: int, scheduler: str | None):
    """None (grade here, one at a time), or an executor whose submit(fn, arg) returns a future:
    this machine's processes, or a Dask cluster."""
    if engine == "local":
        if jobs == 1:
            yield None
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawn: the workers start clean, not as copies of a process that may hold threads
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=warm_worker) as pool:
            for _ in range(jobs):  # a worker starts per task submitted while none is idle: all start now
                pool.submit(int)
            yield pool
        return
    if engine != "dask":
        raise ValueError(f"unknown engine {engine!r}: use local or dask")
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise RuntimeError("--engine dask needs Dask's distributed scheduler: pip install -e '.[scale]'") from None
    if scheduler:  # a running cluster (dask-jobqueue, dask-kubernetes, `dask scheduler`): it must see this folder
        with Client(scheduler) as client:
            yield client
        return
    with LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, memory_limit=0,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


def completed(running: dict, timeout: float) -> list:
    """The futures of `running` that are done, waiting up to `timeout` seconds for one (for any
    executor's futures: concurrent.futures' and Dask's)."""
    end = time.monotonic() + timeout
    while True:
        done = [future for future in running if future.done()]
        if done or time.monotonic() >= end:
            return done
        time.sleep(0.1)


def progress_bar(total: int, progress: bool | None):
    """tqdm's bar (done/total, seconds per submission, ETA) on stderr; by default only on a
    terminal."""
    if progress is False or (progress is None and not sys.stderr.isatty()) or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="submission", desc="grading", file=sys.stderr, dynamic_ncols=True)


def show_running(bar, running: dict) -> None:
    """The submissions being graded now, with their seconds so far: one that stalls shows."""
    if bar is None:
        return
    now = time.perf_counter()
    names = [f"{student} {now - start:.0f}s" for _, student, start, _ in running.values()]
    bar.set_postfix_str("now: " + ", ".join(names)[:120], refresh=True)


def say(bar, line: str) -> None:
    if bar is None:
        print(line, flush=True)
    else:
        bar.write(line)
