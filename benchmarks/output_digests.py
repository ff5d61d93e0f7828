"""Digests of every output a run and a fleet produce, to show that a change moved none of them.

For each run folder, ``toranalyze analyze`` (no report page) writes its tables, ``rates.json`` and
``summary.json``; with ``--fleet``, ``toranalyze fleet`` analyses the folders given as one store. Each
Parquet table is digested by its rows in a canonical order (column order and values exact, floats
bit for bit); JSON files by their text with run-specific paths made relative. ``save`` writes the
digests to a JSON file, ``check`` compares and names every output that moved.

Usage::

    python benchmarks/output_digests.py save --base digests.json sample_logs/* runs/*    # before
    python benchmarks/output_digests.py check --base digests.json sample_logs/* runs/*   # after
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
from click.testing import CliRunner

from toranalyze.cli import cli
from toranalyze.fleet.store import Store


def _frame_digest(path: Path | pl.DataFrame) -> str:
    df = path if isinstance(path, pl.DataFrame) else pl.read_parquet(path)
    # Sorted by every sortable column: a row order that a change may legitimately shuffle is not a move.
    keys = [c for c, t in df.schema.items() if not isinstance(t, pl.List | pl.Struct | pl.Array)]
    nested = [c for c in df.columns if c not in keys]
    if df.height and (keys or nested):  # rows equal in every plain column are ordered by their nested ones
        tie = [pl.struct(nested).hash(0).alias("_tie")] if nested else []
        df = df.with_columns(*tie).sort([*keys, *(["_tie"] if tie else [])], nulls_last=True,
                                         maintain_order=True).drop("_tie", strict=False)
    h = hashlib.sha256(str(df.schema).encode())
    # the values' hashes, not a file's bytes: a table read from several files comes in other
    # record batches, and equal strings in other buffer layouts
    h.update(df.hash_rows(seed=1).to_numpy().tobytes())
    return h.hexdigest()[:16]


def _json_digest(path: Path, root: Path) -> str:
    text = path.read_text().replace(str(root), "<out>")
    doc = json.loads(text)
    for key in ("elapsed_s", "seconds", "generated_at", "created"):  # wall-clock fields, if any
        doc.pop(key, None) if isinstance(doc, dict) else None
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _digests(out: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    if (out / "manifest.json").is_file():  # a fleet store: its Delta tables, not their files (random names)
        found |= {t: _frame_digest(frame) for t, frame in Store(out).read_tables().items()}
    for p in sorted(out.rglob("*")):
        rel = str(p.relative_to(out))
        if "_delta_log" in p.parts or p.name.startswith("."):  # Delta's log (read above as tables), private state
            continue
        if p.suffix == ".parquet" and not (out / "manifest.json").is_file():
            found[rel] = _frame_digest(p)
        elif p.suffix == ".json" and p.name != "manifest.json":
            found[rel] = _json_digest(p, out)
    return found


def _run(args: list[str]) -> float:
    t0 = time.perf_counter()
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    if res.exit_code:
        raise SystemExit(f"toranalyze {' '.join(args)} exited {res.exit_code}:\n{res.output[-2000:]}")
    return time.perf_counter() - t0


def collect(runs: list[Path], fleet: bool) -> tuple[dict[str, dict[str, str]], dict[str, float]]:
    digests: dict[str, dict[str, str]] = {}
    secs: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            out = Path(tmp) / run.name
            secs[run.name] = _run(["analyze", str(run), "-o", str(out), "--no-report", "-q", "-j", "1"])
            digests[run.name] = _digests(out)
        if fleet:
            out = Path(tmp) / "fleet-store"
            secs["fleet"] = _run(["fleet", *map(str, runs), "-o", str(out), "--no-report", "-j", "1"])
            digests["fleet"] = _digests(out)
    return digests, secs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("save", "check"))
    ap.add_argument("runs", nargs="+", type=Path, help="run folders")
    ap.add_argument("--base", type=Path, required=True, help="the saved digests (JSON)")
    ap.add_argument("--fleet", action="store_true", help="also analyse the runs as one fleet store")
    a = ap.parse_args()
    digests, secs = collect(a.runs, a.fleet)
    if a.mode == "save":
        a.base.write_text(json.dumps({"digests": digests, "seconds": secs}, indent=1, sort_keys=True))
        print(f"saved {sum(map(len, digests.values()))} digests of {len(digests)} outputs; "
              f"{sum(secs.values()):.1f} s")
        return 0
    saved = json.loads(a.base.read_text())
    moved = 0
    for name, found in digests.items():
        before = saved["digests"].get(name, {})
        diff = sorted(k for k in before.keys() | found.keys() if before.get(k) != found.get(k))
        moved += bool(diff)
        t0, t1 = saved["seconds"].get(name, float("nan")), secs[name]
        print(f"{name}: {'MOVED ' + ', '.join(diff) if diff else 'identical'} ({t0:.2f} s -> {t1:.2f} s)")
    print(f"total {sum(saved['seconds'].values()):.1f} s -> {sum(secs.values()):.1f} s")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
