"""Where per-file work runs: in this process, or in a pool of worker processes.

Reading a file is independent of every other file, so a run over many files is spread over
worker processes (``--jobs``). Workers are started with ``spawn``: polars' thread pool does not
survive ``fork``. Each worker loads the installed parser plugins itself, so only plugins
registered through entry points are available there; a registry built in-process (tests,
embedding) runs sequentially.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def map_ordered(fn: Callable[[T], R], items: Sequence[T], jobs: int) -> Iterator[R]:
    """fn over items, results in input order; a pool only when it can pay for its start-up."""
    if jobs <= 1 or len(items) < 2:
        yield from map(fn, items)
        return
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(items)), mp_context=ctx) as pool:
        yield from pool.map(fn, items, chunksize=1)
