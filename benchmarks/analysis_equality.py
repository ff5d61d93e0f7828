"""Save the analysis tables of event tables, then check that a changed reconstruction gives them
back exactly (a refactoring that must not move a single value).

Each input is an events parquet file (``toranalyze ingest ... -o DIR`` writes ``DIR/events.parquet``);
its tables (attempts, incidents, slow periods, tor, resources, step rows, checkpoints) and notes
are saved under ``--base/<file stem>/`` and compared with ``polars.testing.assert_frame_equal``
(exact floats).

Usage::

    python benchmarks/analysis_equality.py save --base eq-base runs/*.parquet     # before
    python benchmarks/analysis_equality.py check --base eq-base runs/*.parquet    # after
    python benchmarks/analysis_equality.py check --base eq-base --jobs 2 runs/*.parquet  # threads
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import polars as pl
from polars.testing import assert_frame_equal

from toranalyze.reconstruct.analysis import analyze_events

TABLES = ("attempts", "incidents", "slow_periods", "tor", "resources", "progress", "checkpoints")


def _analyze(path: Path, jobs: int = 1) -> tuple[dict[str, pl.DataFrame], list[str], float]:
    events = pl.read_parquet(path)
    t0 = time.perf_counter()
    a = analyze_events(events, jobs=jobs)
    return {t: getattr(a, t) for t in TABLES}, a.notes, time.perf_counter() - t0


def _differences(tables: dict[str, pl.DataFrame], notes: list[str], saved: Path) -> list[str]:
    out = []
    for t, df in tables.items():
        try:
            assert_frame_equal(df, pl.read_parquet(saved / f"{t}.parquet"), check_exact=True)
        except AssertionError as exc:
            out.append(f"{t}: {str(exc)[:400]}")
    if json.loads((saved / "notes.json").read_text()) != notes:
        out.append("notes differ")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("save", "check"))
    ap.add_argument("events", nargs="+", type=Path, help="events parquet files")
    ap.add_argument("--base", type=Path, required=True, help="where the saved tables are")
    ap.add_argument("--jobs", type=int, default=1, help="threads of the local engine (as analyze -j)")
    a = ap.parse_args()
    different = 0
    for path in a.events:
        tables, notes, secs = _analyze(path, a.jobs)
        saved = a.base / path.stem
        if a.mode == "save":
            saved.mkdir(parents=True, exist_ok=True)
            for t, df in tables.items():
                df.write_parquet(saved / f"{t}.parquet")
            (saved / "notes.json").write_text(json.dumps(notes))
            print(f"{path.stem}: saved ({secs:.2f} s)")
            continue
        diffs = _differences(tables, notes, saved)
        different += bool(diffs)
        print(f"{path.stem}: {'DIFFERENT' if diffs else 'equal'} ({secs:.2f} s)")
        for d in diffs:
            print("   ", d)
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
