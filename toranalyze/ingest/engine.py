"""Where independent work runs: this process, a pool of local processes, or a Ray cluster.

Reading a file, or reconstructing a job once jobs are assigned (``analyze_events``: groups of
jobs balanced by events), is independent of every other file or job, so a run over many of them
is spread by ``map_ordered(fn, items, engine, jobs)``:

* ``local`` (default): in this process when ``jobs`` is 1, else a pool of ``jobs`` worker
  processes started with ``spawn`` (polars' thread pool does not survive ``fork``);
* ``ray``: one Ray task per item, at most ``2 * jobs`` in flight so results stream back in input
  order without piling up. ``address`` names an existing cluster (``ray://host:10001``,
  ``auto``); without one a local Ray instance with ``jobs`` CPUs is started. Ray is an optional
  extra (``pip install 'toranalyze[ray]'``).

``fn`` must be importable at module level (workers import it) and ``items`` picklable. Workers
load the installed parser plugins themselves, so only plugins registered through entry points
are available there; a registry built in-process (tests, embedding) runs in this process.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from toranalyze.errors import ConfigError, WorkerError

T = TypeVar("T")
R = TypeVar("R")

ENGINES = ("local", "ray")


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def map_ordered(
    fn: Callable[[T], R], items: Sequence[T], engine: str = "local", jobs: int = 1, address: str | None = None
) -> Iterator[R]:
    """fn over items, results in input order."""
    if engine == "ray":
        yield from _map_ray(fn, items, jobs, address)
        return
    if engine != "local":
        raise ConfigError(f"unknown engine {engine!r}", hint=f"use one of: {', '.join(ENGINES)}")
    if jobs <= 1 or len(items) < 2:  # a pool only when it can pay for its start-up
        yield from map(fn, items)
        return
    ctx = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, len(items)), mp_context=ctx,
                                 initializer=leave_interrupts_to_the_parent) as pool:
            try:
                for fut in [pool.submit(fn, item) for item in items]:
                    yield settled(fut)
            except BaseException:  # Ctrl-C, or a consumer that stops early
                stop_pool(pool)
                raise
    except BrokenProcessPool:
        raise WorkerError(
            "a worker process ended without its result: the system killed it (out of memory?), or it could "
            "not start (a script that calls toranalyze with jobs > 1 needs an `if __name__ == \"__main__\":` "
            "guard, since workers are started with spawn and import the script again)",
            hint="run with -j 1 (jobs=1) to work in this process, or give the machine more memory",
        ) from None


WAIT_S = 0.25  # a wait without a timeout is not woken by Ctrl-C when the signal lands on another thread


def settled(fut: Future[R]) -> R:
    """The future's result, waited for in short steps so that Ctrl-C interrupts the wait."""
    while True:
        try:
            return fut.result(timeout=WAIT_S)
        except FuturesTimeout:
            continue


def leave_interrupts_to_the_parent() -> None:
    """A worker ignores Ctrl-C (the terminal sends it to the whole process group): the parent
    decides, keeps what finished and stops the workers at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now (what they were doing is lost)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())  # (no public handle on them)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "the ray engine needs Ray, which is not installed",
            hint="pip install 'toranalyze[ray]'",
        ) from None
    return ray


def init_ray(jobs: int, address: str | None = None) -> Any:
    """Connect to ``address`` or start a local Ray instance with ``jobs`` CPUs (once per process)."""
    ray = import_ray()
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=max(1, jobs), **kwargs)
    return ray


def _map_ray(fn: Callable[[T], R], items: Sequence[T], jobs: int, address: str | None) -> Iterator[R]:
    ray = init_ray(jobs, address)
    # Retried only when Ray loses the worker (its memory monitor, a node gone); fn itself never raises.
    task = ray.remote(num_cpus=1, max_retries=3)(fn)
    window = max(2, 2 * max(1, jobs))
    pending: deque[Any] = deque()
    for item in items:
        pending.append(task.remote(item))
        if len(pending) >= window:
            yield ray.get(pending.popleft())
    while pending:
        yield ray.get(pending.popleft())
