"""How long the command line takes to show its help, against a bare interpreter's start. Prints JSON.

    python benchmarks/cli_startup.py                  # toranalyze --help, then each command's
    python benchmarks/cli_startup.py --repeat 9 --commands fleet,analyze

Each figure is the median wall time of ``--repeat`` runs of ``python -m toranalyze ... --help``;
``ratio`` divides it by the median of ``python -c pass`` measured in the same rounds (alternated,
so a busy machine slows both), which is what the start-up costs beyond Python itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def _seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def measure(commands: list[str], repeat: int) -> dict[str, dict[str, float]]:
    """Median seconds of each command's ``--help`` ("" for the top level) and its ratio to ``python -c pass``."""
    bare: list[float] = []
    times: dict[str, list[float]] = {c: [] for c in commands}
    for _ in range(repeat):
        for c in commands:
            bare.append(_seconds([sys.executable, "-c", "pass"]))
            times[c].append(_seconds([sys.executable, "-m", "toranalyze", *([c] if c else []), "--help"]))
    base = statistics.median(bare)
    result = {"python -c pass": {"s": round(base, 4), "ratio": 1.0}}
    for c, ts in times.items():
        med = statistics.median(ts)
        result[f"toranalyze {c} --help".replace("  ", " ")] = {"s": round(med, 4), "ratio": round(med / base, 1)}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--commands", default=",ingest,fleet,analyze,simulate",
                    help="comma-separated; an empty name is the top-level help")
    args = ap.parse_args()
    print(json.dumps(measure(args.commands.split(","), args.repeat), indent=1))


if __name__ == "__main__":
    main()
