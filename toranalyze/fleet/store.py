"""The fleet store: per-run parts, the merged tables and the manifest, all written atomically.

Layout of the store directory::

    manifest.json                  the commit point: runs (id, path, content hash, part) and the
                                   digest of every merged table
    jobs.parquet  attempts.parquet  incidents.parquet  exposure.parquet   (merged, run order)
    runs/<part>/<table>.parquet    one immutable part per analysed run version

A part's name is its run's content hash (files, id, analysis options, version), so a part never
changes once written: it is written into a temporary directory and renamed into place. Merged
tables are written to a temporary name and renamed (``os.replace``); the manifest is written
last the same way, then parts no longer listed are deleted. After a crash at any point the
manifest names only complete parts, each table is whole (old or new), and the next run
re-merges whatever does not match the manifest's digests: the store heals itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from toranalyze.errors import InputError
from toranalyze.fleet.tables import SCHEMAS, TABLES, RunTables

MANIFEST = "manifest.json"
PARTS = "runs"
STORE_VERSION = 1


@dataclass(frozen=True)
class StoredRun:
    id: str
    path: str
    hash: str
    error: str | None = None  # why the run gave no rows (nothing readable, an internal error)


@dataclass
class Manifest:
    runs: list[StoredRun] = field(default_factory=list)
    tables: dict[str, str] = field(default_factory=dict)  # table -> digest of its file

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "store_version": STORE_VERSION,
            "runs": [
                {"id": r.id, "path": r.path, "hash": r.hash, **({"error": r.error} if r.error else {})}
                for r in sorted(self.runs, key=lambda r: r.id)
            ],
            "tables": dict(sorted(self.tables.items())),
        }
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def read_manifest(store: Path) -> Manifest:
    path = store / MANIFEST
    if not path.exists():
        return Manifest()
    try:
        doc = json.loads(path.read_text())
        runs = [StoredRun(r["id"], r["path"], r["hash"], r.get("error")) for r in doc["runs"]]
        return Manifest(runs, dict(doc.get("tables", {})))
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"not a fleet manifest ({exc})", path=str(path),
                         hint="point -o at a new directory, or delete this one to rebuild the store") from exc


def file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "blake2b").hexdigest()[:32]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _atomic_write_bytes(path: Path, write: Any) -> None:
    """``write(tmp_path)`` then rename over ``path``; the temporary file never survives an error."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the user's usual mode
    try:
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_table(frame: pl.DataFrame, path: Path) -> None:
    _atomic_write_bytes(path, lambda tmp: frame.write_parquet(tmp, statistics=True))


def write_text(text: str, path: Path) -> bool:
    """Write ``text`` atomically unless ``path`` already holds it (an unchanged re-run touches
    nothing). Returns whether it was written."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    _atomic_write_bytes(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return True


def part_dir(store: Path, run_hash: str) -> Path:
    return store / PARTS / run_hash


STATUS = "status.json"  # a part's error (if any) and the analysis' notes


def has_part(store: Path, run_hash: str) -> bool:
    d = part_dir(store, run_hash)
    return (d / STATUS).is_file() and all((d / f"{t}.parquet").is_file() for t in TABLES)


def read_status(store: Path, run_hash: str) -> dict[str, Any]:
    status: dict[str, Any] = json.loads((part_dir(store, run_hash) / STATUS).read_text())
    return status


def write_part(store: Path, run_hash: str, tables: RunTables, status: dict[str, Any],
               pages: dict[str, str] | None = None) -> None:
    """Write one run's tables, status and pages (file name -> HTML: its job report) as an
    immutable part: a temporary directory renamed into place."""
    final = part_dir(store, run_hash)
    if has_part(store, run_hash):
        return  # content-addressed: the same bytes are there already
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{run_hash}.", suffix=".tmp", dir=final.parent))
    tmp.chmod(0o777 & ~_umask())  # mkdtemp makes 0700
    try:
        for t in TABLES:
            tables.get(t).write_parquet(tmp / f"{t}.parquet", statistics=True)
        for name, text in (pages or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
        (tmp / STATUS).write_text(json.dumps(status, indent=1, sort_keys=True) + "\n")
        if final.exists():  # a leftover of a crash before this directory was complete
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_part(store: Path, run_hash: str, table: str) -> pl.DataFrame:
    return pl.read_parquet(part_dir(store, run_hash) / f"{table}.parquet")


def merge(store: Path, runs: Sequence[StoredRun], table: str) -> pl.DataFrame:
    """The merged table: every listed run's part, in run-id order."""
    frames = [read_part(store, r.hash, table) for r in sorted(runs, key=lambda r: r.id)]
    if not frames:
        return pl.DataFrame(schema=SCHEMAS[table])
    return pl.concat(frames, how="vertical")


def tables_current(store: Path, manifest: Manifest) -> bool:
    """Do the merged tables on disk match the manifest's digests?"""
    for t in TABLES:
        path = store / f"{t}.parquet"
        if t not in manifest.tables or not path.is_file() or file_digest(path) != manifest.tables[t]:
            return False
    return True


def commit(store: Path, runs: Sequence[StoredRun], before: Manifest) -> tuple[Manifest, bool]:
    """Merge the runs' parts into the four tables, write them, then the manifest, then drop parts
    no longer listed. Returns the new manifest and whether anything was rewritten."""
    new = Manifest(sorted(runs, key=lambda r: r.id), dict(before.tables))
    same_runs = [(r.id, r.hash, r.path, r.error) for r in new.runs] == [
        (r.id, r.hash, r.path, r.error) for r in sorted(before.runs, key=lambda r: r.id)
    ]
    if same_runs and tables_current(store, before):
        return before, False
    for t in TABLES:
        path = store / f"{t}.parquet"
        write_table(merge(store, new.runs, t), path)
        new.tables[t] = file_digest(path)
    write_text(new.to_json(), store / MANIFEST)
    collect_garbage(store, new)
    return new, True


def collect_garbage(store: Path, manifest: Manifest) -> None:
    """Delete parts and temporary files no manifest run points to."""
    keep = {r.hash for r in manifest.runs}
    parts = store / PARTS
    if parts.is_dir():
        for d in parts.iterdir():
            if d.name not in keep:
                shutil.rmtree(d, ignore_errors=True) if d.is_dir() else d.unlink(missing_ok=True)
    for f in store.glob(".*.tmp"):
        f.unlink(missing_ok=True)
