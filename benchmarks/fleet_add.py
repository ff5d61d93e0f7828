"""Adding one run to a fleet store, the whole command: ``toranalyze fleet RUN -o STORE --add``.

Copies a run folder under ``--adds`` new names (beside the store, in a temporary folder) and times
each addition as a user runs it, in a fresh process (start-up, imports, finding and hashing the
run, its analysis and the store's commit, all included). Run it on stores of different sizes to see
that the cost does not grow with the store. Prints JSON: the store's runs before, the median and
largest wall time, and the CPU (user + system) of each addition.

    python benchmarks/fleet_add.py STORE RUN [--adds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _runs(store: Path) -> int:
    return int(json.loads((store / "manifest.json").read_text())["runs"])


def add_once(store: Path, run: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one ``fleet RUN -o STORE --add --no-report -q`` in a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "toranalyze", "fleet", str(run), "-o", str(store), "--add", "--no-report",
                    "-q"], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path, help="a fleet store (built with toranalyze fleet)")
    ap.add_argument("run", type=Path, help="a run folder to add, copied under new names each time")
    ap.add_argument("--adds", type=int, default=5)
    a = ap.parse_args()
    before = _runs(a.store)
    with tempfile.TemporaryDirectory(dir=a.store.parent) as tmp:
        times = []
        for k in range(a.adds):
            copy = Path(tmp) / f"added-{os.getpid()}-{k}"
            shutil.copytree(a.run, copy, symlinks=True)
            times.append(add_once(a.store, copy))
    walls = [w for w, _ in times]
    print(json.dumps({"store_runs_before": before, "store_runs_after": _runs(a.store), "adds": a.adds,
                      "wall_s": {"median": round(statistics.median(walls), 2), "max": round(max(walls), 2)},
                      "cpu_s": [round(c, 2) for _, c in times]}, indent=1))


if __name__ == "__main__":
    main()
