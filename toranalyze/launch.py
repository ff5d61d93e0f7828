"""The console entry point: settles the process's memory allocator, then runs the command line.

polars allocates with jemalloc, which reads its settings once, when polars loads; so they are
chosen here, before anything imports polars. ``analyze`` builds and drops many table-sized
columns (80 MB each at 10M events); the kernel maps and zeroes each fresh one a 4 KiB page at a
time, and a third of the analysis' CPU time is system time. With transparent huge pages
(``thp:always``) a fault maps 2 MiB: on 10M events with two threads, 3.2M page faults -> 0.23M,
and ``analyze_events`` took 15.0 s (median of 9 runs) against 16.7 s (11 runs), at the same peak
memory. (Keeping freed pages longer, ``dirty_decay_ms``, saved as much again in system time but
not in wall time, for 0.4 GB more.) ``ingest`` keeps the default: huge pages cost it 120 MB a
process for a few percent of speed, and its memory bound matters more; so do the worker
processes ``analyze`` starts to read files (the setting leaves the environment once polars has
loaded, before any worker starts). A value the user set is left alone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping, Sequence

MALLOC_ENV = "_RJEM_MALLOC_CONF"  # the variable polars' jemalloc reads
ANALYSIS_MALLOC_CONF = "thp:always"
_ANALYSIS_COMMANDS = frozenset({"analyze"})


def analysis_allocator(argv: Sequence[str], environ: MutableMapping[str, str]) -> bool:
    """Set the analysis allocator settings in ``environ`` when ``argv`` runs an analysis
    command and the user set none; return whether it was set."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in _ANALYSIS_COMMANDS or MALLOC_ENV in environ:
        return False
    environ[MALLOC_ENV] = ANALYSIS_MALLOC_CONF
    return True


def main() -> None:
    if analysis_allocator(sys.argv[1:], os.environ):
        import polars  # noqa: F401  (loaded, hence its allocator configured, with the setting)

        del os.environ[MALLOC_ENV]  # processes started from here on get the user's environment
    from toranalyze.cli import main as cli_main

    cli_main()
