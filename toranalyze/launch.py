"""The console entry point: settles the process's memory allocator, then runs the command line.

polars allocates with jemalloc, which reads its settings once, when polars loads; so they are
chosen here, before anything imports polars. ``analyze`` builds and drops many table-sized
columns (80 MB each at 10M events). By default jemalloc hands freed pages back to the kernel
within a second, and the kernel maps and zeroes every fresh one a 4 KiB page at a time: a
quarter of the analysis' CPU time was system time. For ``analyze`` the freed pages are kept for
reuse (``dirty_decay_ms:-1,muzzy_decay_ms:-1``) and new ones are mapped as transparent huge
pages (``thp:always``). On 10M events with two threads, eight alternated rounds: 17.1 s median
with the default, 14.0 s with both (page faults 2.4M -> 0.02M), for about 1.1 GB more peak
memory (7.9 -> 9.0 GB). Kept pages alone gave 15.2 s; huge pages alone had not paid (the
kernel zeroes the same bytes). ``ingest`` keeps the default, whose memory bound matters more,
and so do the worker processes ``analyze`` starts to read files: the setting leaves the
environment once polars has loaded, before any worker starts. A value the user set is left
alone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping, Sequence

MALLOC_ENV = "_RJEM_MALLOC_CONF"  # the variable polars' jemalloc reads
ANALYSIS_MALLOC_CONF = "thp:always,dirty_decay_ms:-1,muzzy_decay_ms:-1"
_ANALYSIS_COMMANDS = frozenset({"analyze"})


def analysis_allocator(argv: Sequence[str], environ: MutableMapping[str, str], platform: str = sys.platform) -> bool:
    """Set the analysis allocator settings in ``environ`` when ``argv`` runs an analysis
    command on Linux (where they were measured; huge pages are Linux's) and the user set none;
    return whether it was set."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in _ANALYSIS_COMMANDS or MALLOC_ENV in environ or not platform.startswith("linux"):
        return False
    environ[MALLOC_ENV] = ANALYSIS_MALLOC_CONF
    return True


def main() -> None:
    if analysis_allocator(sys.argv[1:], os.environ):
        import polars  # noqa: F401  (loaded, hence its allocator configured, with the setting)

        del os.environ[MALLOC_ENV]  # processes started from here on get the user's environment
    from toranalyze.cli import main as cli_main

    cli_main()
