"""The fleet store at scale: build stores of synthetic runs in batches, then time adding one run,
an unchanged re-run and count files per table after compaction. Prints JSON.

    python benchmarks/fleet_store.py                       # stores of 1,000 and 100,000 runs
    python benchmarks/fleet_store.py --sizes 1000 --adds 3

Each synthetic run has realistic row counts (1 job, 3 attempts, 2 incidents, 10 exposure rows,
values filled) and one small log file, so the re-run's stamp check stats real files. Measured:

- ``add_one_s``: open the store, look its hashes up, record one new run (one commit of each
  table and the manifest, and the compaction that commit triggers, if any); the median and the
  largest of ``--adds`` additions.
- ``rerun_s``: an unchanged re-run's store work: open the store (the crash check), read the stored
  hashes and file stamps, hash every run (a stat per file, nothing read) and commit the run set
  (nothing written).
- ``files``: data files of each table's current version after ``compact(force=True)``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toranalyze.fleet import store  # noqa: E402
from toranalyze.fleet.runs import Run  # noqa: E402
from toranalyze.fleet.stamps import hash_run  # noqa: E402
from toranalyze.fleet.tables import SCHEMAS, SORT_KEYS, TABLES, RunTables  # noqa: E402

ROWS = {"jobs": 1, "attempts": 3, "incidents": 2, "exposure": 10}
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _column(name: str, dtype: pl.DataType, n: int, offset: int) -> pl.Series:
    """Plausible values of a column (so files have realistic sizes), from the row numbers."""
    i = pl.int_range(offset, offset + n)
    if dtype == pl.String:
        expr = pl.lit(f"{name}-") + (i % 97).cast(pl.String)
    elif dtype == pl.Boolean:
        expr = i % 3 == 0
    elif isinstance(dtype, pl.Datetime):
        expr = pl.lit(T0) + pl.duration(seconds=i * 37)
    elif isinstance(dtype, pl.List) and dtype.inner == pl.String:
        expr = pl.concat_list(pl.lit("n") + (i % 64).cast(pl.String))
    elif isinstance(dtype, pl.List):
        expr = pl.concat_list(i % 64)
    elif dtype.is_float():
        expr = i * 0.37 % 1000
    else:
        expr = i % 1000
    return pl.select(expr.cast(dtype).alias(name)).to_series()


def batch_tables(runs: list[str], offset: int) -> dict[str, RunTables]:
    """Synthetic rows of ``runs``, built a batch at a time and split per run."""
    frames: dict[str, dict[str, pl.DataFrame]] = {}
    for t in TABLES:
        k = ROWS[t]
        n = len(runs) * k
        cols = {c: _column(c, d, n, offset * k) for c, d in SCHEMAS[t].items() if c not in ("run", "job")}
        frame = pl.DataFrame({"run": [r for r in runs for _ in range(k)], "job": ["job-0"] * n, **cols})
        if "attempt" in frame.columns:
            frame = frame.with_columns((pl.int_range(n) % k + 1).cast(pl.Int32).alias("attempt"))
        if t == "incidents":
            frame = frame.with_columns((pl.int_range(n) % k + 1).cast(pl.Int32).alias("incident"))
        if t == "exposure":
            frame = frame.with_columns(pl.format("node-{}", pl.int_range(n) % k).alias("node"))
        frame = frame.select(SCHEMAS[t].names()).cast(dict(SCHEMAS[t]))  # type: ignore[arg-type]
        frames[t] = frame.sort(["run", *SORT_KEYS[t]]).partition_by("run", as_dict=True)  # type: ignore[assignment]
    return {r: RunTables(*(frames[t][(r,)] for t in TABLES)) for r in runs}  # type: ignore[index]


def _run(logs: Path, i: int) -> Run:
    name = f"r{i:06d}"
    return Run(f"fleet/{name}", str(logs), (f"{name}.log",))


def _records(logs: Path, lo: int, hi: int) -> list[store.RunRecord]:
    runs = [_run(logs, i) for i in range(lo, hi)]
    for r in runs:
        (logs / r.files[0]).write_text(f"{r.id}: step 1 loss 2.5\n")
    tables = batch_tables([r.id for r in runs], lo)
    out = []
    for r in runs:
        h, stamps = hash_run(r, "bench")
        out.append(store.RunRecord(r.id, r.path, h, tables[r.id], {"error": None, "notes": [], "files_failed": 0},
                                   {}, stamps))
    return out


def build_store(root: Path, logs: Path, n: int, batch: int) -> float:
    t = time.perf_counter()
    s = store.Store(root)
    for lo in range(0, n, batch):
        s.record(_records(logs, lo, min(n, lo + batch)))
    return time.perf_counter() - t


def add_one(root: Path, logs: Path, i: int) -> float:
    rec = _records(logs, i, i + 1)[0]
    t = time.perf_counter()
    s = store.Store(root)
    assert rec.hash not in s.hashes()
    s.record([rec])
    return time.perf_counter() - t


def rerun(root: Path, logs: Path, n: int) -> tuple[float, bool]:
    runs = [_run(logs, i) for i in range(n)]
    t = time.perf_counter()
    s = store.Store(root)
    known, stored = s.stamps(), s.hashes()
    current = []
    for r in runs:
        h, stamps = hash_run(r, "bench", known=known)
        assert h in stored
        current.append({"run": r.id, "path": r.path, "hash": h, "files": stamps.drop("run").to_dicts()})
    schema = {c: store.RUNS_SCHEMA[c] for c in ("run", "path", "hash", "files")}
    wrote = s.commit(pl.DataFrame(current, schema=schema))
    return time.perf_counter() - t, wrote


def _disk_files(table: Path) -> int:
    return sum(f.endswith(".parquet") for _, _, fs in os.walk(table) for f in fs)


def measure(n: int, batch: int, adds: int, work: Path) -> dict[str, object]:
    root, logs = work / f"store-{n}", work / f"logs-{n}"
    logs.mkdir(parents=True)
    built = build_store(root, logs, n, batch)
    add = [add_one(root, logs, n + k) for k in range(adds)]
    total = n + adds
    again, wrote = rerun(root, logs, total)
    s = store.Store(root)
    t = time.perf_counter()
    s.compact(force=True)
    compact_s = time.perf_counter() - t
    return {
        "runs": total,
        "buckets": s.manifest.buckets,
        "build_s": round(built, 1),
        "add_one_s": {"median": round(statistics.median(add), 3), "max": round(max(add), 3)},
        "rerun_s": round(again, 2),
        "rerun_wrote": wrote,
        "compact_s": round(compact_s, 2),
        "files": {t: s.files(t) for t in (*TABLES, store.RUNS)},
        "files_on_disk": {t: _disk_files(root / t) for t in (*TABLES, store.RUNS)},
        "bound_files_per_table": max(1, total // 1000),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    ap.add_argument("--batch", type=int, default=1000, help="runs per commit while building")
    ap.add_argument("--adds", type=int, default=5, help="single-run additions timed per size")
    ap.add_argument("--dir", type=Path, default=None, help="where the temporary work folder goes")
    ap.add_argument("--keep", type=Path, default=None, help="build the stores in this new folder and keep them")
    a = ap.parse_args()
    if a.keep:  # the stores stay for a look (or a profile) afterwards
        a.keep.mkdir(parents=True)
        results = [measure(n, a.batch, a.adds, a.keep) for n in a.sizes]
    else:
        with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
            results = [measure(n, a.batch, a.adds, Path(tmp)) for n in a.sizes]
    print(json.dumps({"runs_per_bucket": store.RUNS_PER_BUCKET, "compact_at": store.COMPACT_AT, "sizes": results},
                     indent=1))


if __name__ == "__main__":
    main()
