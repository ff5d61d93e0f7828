"""Run regex-heavy polars work on long-lived threads, one per kind of work.

polars caches compiled regular expressions per calling thread, in a least-recently-used cache
of 32 patterns. Reading one file uses hundreds of patterns (every parser's, the noise list, the
classification rules), so on a single thread each file compiles all of them again: on a small
file that compilation was a quarter of its cost, the noise alternation alone about 17 ms.
Running each parser (and the noise and classification steps) on a thread of its own keeps each
one's patterns compiled from one file to the next. The caller waits for the result, so nothing
runs concurrently and results are unchanged; only where patterns are compiled changes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_EXECUTORS: dict[str, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def _executor(key: str) -> ThreadPoolExecutor:
    with _LOCK:
        ex = _EXECUTORS.get(key)
        if ex is None:
            ex = _EXECUTORS[key] = ThreadPoolExecutor(1, thread_name_prefix=f"toranalyze-{key}")
        return ex


def on_thread(key: str, fn: Callable[[], T]) -> T:
    """``fn()`` run on the thread kept for ``key``; exceptions propagate to the caller."""
    if threading.current_thread().name.startswith(f"toranalyze-{key}_"):
        return fn()  # already there (a nested call): submitting would deadlock
    return _executor(key).submit(fn).result()
