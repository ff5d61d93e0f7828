"""The fleet store: Delta Lake tables appended batch by batch, and a small manifest as commit point.

Layout of the store directory::

    manifest.json                  the commit point: the version of each table that is current
    runs/                          Delta table, one row per stored run: id, path, content hash,
                                   status (error, notes, files failed), its files' stamps
    jobs/ attempts/ incidents/ exposure/    Delta tables of the runs' rows
    reports/<name>/report.html     a run's job report (``jobs.report`` links it); <name> is the
                                   run's folder name (page_name), with a short hash of the run id
                                   when another run holds it; a .run file in it names the run

Every table is partitioned by ``bucket``, a stable hash of the run id modulo the manifest's
bucket count: the largest power of two that leaves RUNS_PER_BUCKET (1,000) runs or more per
bucket on average. A batch of new runs appends files and rewrites nothing; replacing or dropping a
run rewrites only the files of its bucket (about 1,000 to 2,000 runs' rows, however large the
store); compaction merges a bucket's files into one, so a compacted table has at most one file
per 1,000 runs. When the store doubles (or halves) past a power of two, each table is rewritten
once with the new bucket count: each row is rewritten about once per doubling of the store, a
constant cost per run.

A commit writes the reports, then one Delta transaction per table (rows of re-analysed and
dropped runs deleted and the new rows added in the same transaction), then ``manifest.json``
(atomically renamed). Readers read each table at the manifest's version, so a crash anywhere
leaves the previous store readable; the next open restores any table a crash left ahead of the
manifest (``restore`` to the manifest's version) and the batch is analysed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from deltalake import CommitProperties, DeltaTable, write_deltalake

from toranalyze.errors import InputError
from toranalyze.fleet.stamps import KNOWN_SCHEMA, STAMP_FIELDS
from toranalyze.fleet.tables import SCHEMAS, SORT_KEYS, TABLES, RunTables
from toranalyze.schema import frame_schema

MANIFEST = "manifest.json"
ROOTS = "roots.json"  # the folders of the last full build, for naming runs added alone (fleet --add)
COMMITTING = ".committing"  # present from a commit's first page to its manifest: a crash in between
PARTS = "reports"  # reports/<name>/<page>: a run's pages (jobs.report links them; in older stores <hash>)
OWNER = ".run"  # in a run's page folder: the run id (the folder's name is for people, not a key)
PENDING = ".pending"  # .<page>.<hash>.pending: a re-analysed run's page, in place once its rows are committed
RUNS = "runs"
DELTA_TABLES = (RUNS, *TABLES)
STORE_VERSION = 2
V1, V1_PARTS = 1, ".runs-format-1"  # an earlier format, migrated on open (Store._migrate)
RUNS_PER_BUCKET = 1000  # the fewest runs a bucket holds once the store has that many
MAX_BUCKETS = 1024
COMPACT_AT = 8  # files in one bucket of one table (one per batch that touched it) before compacting it
# Files a commit made obsolete stay this long for readers still reading the previous version; the
# store's own crash safety needs only the manifest's versions, which vacuum never touches.
RETENTION_HOURS = 1
# Table properties: a checkpoint every 10 commits and removed files forgotten by checkpoints after
# RETENTION_HOURS, so opening a table reads a small checkpoint and at most 10 commits however long
# the store's history; a week of log for time travel.
TABLE_CONFIG = {
    "delta.checkpointInterval": "10",
    "delta.deletedFileRetentionDuration": f"interval {RETENTION_HOURS} hours",
    "delta.logRetentionDuration": "interval 7 days",
}
# Commits after the manifest's version that change no rows (a crash after compacting or vacuuming).
NO_DATA_CHANGE = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})

STAMP = pl.Struct(STAMP_FIELDS)
RUNS_SCHEMA = frame_schema({
    "run": pl.String,
    "path": pl.String,
    "hash": pl.String,  # content hash (stamps.hash_runs): the run is analysed again when it changes
    "error": pl.String,  # why the run gave no rows (nothing readable, an internal error)
    "notes": pl.List(pl.String),  # the analysis' notes
    "files_failed": pl.Int64,
    "files": pl.List(STAMP),  # size, mtime and digest of each file when hashed
    "generation": pl.Int64,  # the commit that wrote the run's rows (each table commit names its generation)
})


@dataclass(frozen=True)
class StoredRun:
    id: str
    path: str
    hash: str
    error: str | None = None
    notes: tuple[str, ...] = ()
    files_failed: int = 0
    generation: int = 0


@dataclass(frozen=True)
class RunRecord:
    """A run to store: its tables, status ({error, notes, files_failed}) and pages (file name ->
    text, e.g. its job report), and its files' stamps (the columns of stamps.STAMP_FIELDS);
    ``tables`` None keeps the stored rows and updates only the run's path and file stamps."""

    id: str
    path: str
    hash: str
    tables: RunTables | None
    status: Mapping[str, Any] = field(default_factory=dict)
    pages: Mapping[str, str] = field(default_factory=dict)
    files: pl.DataFrame | None = None


@dataclass
class Manifest:
    generation: int = 0  # commits so far
    versions: dict[str, int] = field(default_factory=dict)  # Delta table -> its current version
    buckets: int = 1  # the tables' partitions: bucket = hash(run id) % buckets
    runs: int = 0  # runs stored (what the bucket count follows)

    def to_json(self) -> str:
        doc = {"store_version": STORE_VERSION, "generation": self.generation, "buckets": self.buckets,
               "runs": self.runs, "versions": dict(sorted(self.versions.items()))}
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def read_manifest(store: Path) -> Manifest:
    doc = _manifest_doc(store)
    if not doc or doc["store_version"] == V1:
        return Manifest()  # no store yet, or one of format 1 (migrated by Store)
    try:
        return Manifest(int(doc["generation"]), {k: int(v) for k, v in doc["versions"].items()}, int(doc["buckets"]),
                        int(doc["runs"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _not_a_manifest(store, exc) from exc


def _manifest_doc(store: Path) -> dict[str, Any]:
    """manifest.json as a dict ({} when there is none), of a format this version reads."""
    path = store / MANIFEST
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
        version = doc.get("store_version")
    except (ValueError, AttributeError) as exc:
        raise _not_a_manifest(store, exc) from exc
    if version not in (V1, STORE_VERSION):
        raise InputError(f"a fleet store of another toranalyze (format {version}, this one reads {STORE_VERSION})",
                         path=str(path), hint="point -o at a new directory, or delete this one to rebuild it")
    return dict(doc)


def _not_a_manifest(store: Path, exc: Exception) -> InputError:
    return InputError(f"not a fleet manifest ({exc})", path=str(store / MANIFEST),
                      hint="point -o at a new directory, or delete this one to rebuild the store")


def bucket(run_id: str, buckets: int) -> int:
    """The run's partition: stable across processes and versions (not Python's salted hash)."""
    return int.from_bytes(hashlib.blake2b(run_id.encode(), digest_size=8).digest(), "big") % buckets


def bucket_count(runs: int) -> int:
    """The largest power of two that leaves at least RUNS_PER_BUCKET runs in each bucket (1 for a
    small store), at most MAX_BUCKETS."""
    n = 1
    while n * 2 * RUNS_PER_BUCKET <= runs and n < MAX_BUCKETS:
        n *= 2
    return n


# ---- atomic files (also used by ``analyze`` and the reports) ----


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


# ---- the store ----


class Store:
    """The fleet store at ``root``. Opening it heals what a crash left behind; ``record`` adds
    batches of analysed runs; ``commit`` settles the set of runs; ``read`` gives a table."""

    def __init__(self, root: Path) -> None:
        self.root = root
        doc = _manifest_doc(root)
        self.manifest = read_manifest(root)
        self._runs: pl.DataFrame | None = None
        self._tables: dict[str, DeltaTable] = {}  # loaded once per store object, updated by each commit
        self.healed = self._heal()
        if doc.get("store_version") == V1:
            self._migrate(doc)

    def _migrate(self, doc: Mapping[str, Any]) -> None:
        """Bring a store of format 1 (one folder of Parquet files per run under runs/, merged
        tables, a manifest listing the runs) into this one without analysing anything again: its
        parts are moved aside (one rename), recorded in one commit, then deleted. A crash before
        that commit leaves the format-1 manifest and the parts aside, and the next open starts over."""
        parts, aside = self.root / RUNS, self.root / V1_PARTS
        if parts.is_dir() and not (parts / "_delta_log").exists() and not aside.exists():
            os.replace(parts, aside)
        records = [_v1_record(aside / r["hash"], r) for r in doc.get("runs", [])
                   if (aside / r["hash"] / "status.json").is_file()]
        self.manifest.buckets = bucket_count(len(records))  # partitioned right away, not re-bucketed after
        self.record(records)
        shutil.rmtree(aside, ignore_errors=True)
        for t in TABLES:
            (self.root / f"{t}.parquet").unlink(missing_ok=True)

    # -- reading --

    def read(self, table: str) -> pl.DataFrame:
        """A fleet table at the manifest's version, with its schema, sorted by run then its keys
        (the same rows in the same order however the store was built)."""
        frame = self._read_delta(table, SCHEMAS[table])
        return frame.sort(["run", *SORT_KEYS[table]], nulls_last=True)

    def read_tables(self) -> dict[str, pl.DataFrame]:
        return {t: self.read(t) for t in TABLES}

    def run_frame(self) -> pl.DataFrame:
        """The runs table (RUNS_SCHEMA), read once per store object and kept up to date by commits."""
        if self._runs is None:
            self._runs = self._read_delta(RUNS, RUNS_SCHEMA)
        return self._runs

    def runs(self, rows: pl.DataFrame | None = None) -> dict[str, StoredRun]:
        """The stored runs by id (of ``rows``, a part of the runs table; default all of it)."""
        rows = self.run_frame() if rows is None else rows
        columns = ("run", "path", "hash", "error", "notes", "files_failed", "generation")
        return {rid: StoredRun(rid, path, h, error, tuple(notes or ()), failed or 0, generation)
                for rid, path, h, error, notes, failed, generation in zip(*(rows[c].to_list() for c in columns),
                                                                           strict=True)}

    def hashes(self) -> set[str]:
        """The content hashes stored: a run whose hash is here needs no analysis."""
        return set(self.run_frame()["hash"])

    def rows_of(self, ids: Collection[str]) -> pl.DataFrame:
        """The runs table's rows of these runs only: what adding runs reads, at a cost that does
        not grow with the store (only their buckets' files are read)."""
        return self._stored_rows(ids)

    def stamps(self, rows: pl.DataFrame | None = None) -> pl.DataFrame:
        """The stored files' stamps by run folder and file name (stamps.KNOWN_SCHEMA), of ``rows``
        (default: every run)."""
        rows = self.run_frame() if rows is None else rows
        files = rows.select("path", "files").explode("files").drop_nulls("files").unnest("files")
        return files.select(KNOWN_SCHEMA.names())

    def roots(self) -> dict[str, str]:
        """The folders the store was last built from (absolute path -> the name its runs' ids
        start with): how ``fleet --add`` names a run found under one of them."""
        try:
            doc = json.loads((self.root / ROOTS).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}

    def set_roots(self, roots: Mapping[str, str]) -> None:
        write_text(json.dumps(dict(sorted(roots.items())), indent=1) + "\n", self.root / ROOTS)

    def _read_delta(self, name: str, schema: pl.Schema) -> pl.DataFrame:
        version = self.manifest.versions.get(name)
        if version is None:
            return pl.DataFrame(schema=schema)
        frame = pl.read_delta(str(self.root / name), version=version)
        return frame.select(pl.col(c).cast(t) for c, t in schema.items())

    # -- writing --

    def record(self, batch: Sequence[RunRecord], drop: Collection[str] = ()) -> bool:
        """Store a batch of runs: their pages, then one transaction per table that deletes the
        rows of the batch's runs already stored (re-analysed) and of ``drop`` (runs gone) and adds
        the batch's rows, then the manifest; then the upkeep (bucket count, compaction). Returns
        whether anything was written."""
        stored = self._stored_rows([*(r.id for r in batch), *drop])  # only these runs: one bucket per run
        known = dict(zip(stored["run"], stored["hash"], strict=True))
        gone = {r for r in drop if r in known}
        if not batch and not gone:
            return False
        self.root.mkdir(parents=True, exist_ok=True)
        marker = self.root / COMMITTING
        write_text(f"{self.manifest.generation + 1}\n", marker)  # pages of an unfinished commit get swept
        folders = {r.id: self._write_pages(r) for r in batch if r.pages}
        m, ids = self.manifest, [r.id for r in batch]
        new = Manifest(m.generation + 1, dict(m.versions), m.buckets, m.runs + len(set(ids) - set(known)) - len(gone))
        analysed = [r for r in batch if r.tables is not None]
        redo = {r.id for r in analysed if r.id in known} | gone
        for t in TABLES:
            rows = [_linked(r.tables.jobs, r.hash, folders.get(r.id)) if t == "jobs" else r.tables.get(t)
                    for r in analysed if r.tables is not None]
            self._write(t, pl.concat(rows) if rows else pl.DataFrame(schema=SCHEMAS[t]), redo, new)
        run_rows = _run_rows(batch, stored, new.generation)
        self._write(RUNS, run_rows, {i for i in ids if i in known} | gone, new)
        self._commit_manifest(new)
        self._publish_pages({r.id: r.hash for r in batch if r.id in folders})
        marker.unlink()
        if self._runs is not None:
            self._runs = pl.concat([self._runs.filter(~pl.col("run").is_in([*ids, *gone])), run_rows])
        new_hashes = set(run_rows["hash"])
        self._drop_pages(h for rid, h in known.items() if rid in gone or (rid in redo and h not in new_hashes))
        for rid in gone | {r.id for r in analysed if r.id in redo and not r.pages}:  # no page any more
            if (d := self.run_pages(rid)) is not None:
                shutil.rmtree(d, ignore_errors=True)
        if not self.rebucket():
            self.compact()
        return True

    def _stored_rows(self, ids: Collection[str]) -> pl.DataFrame:
        """The runs table's rows of these runs, reading only the files of their buckets."""
        if not ids:
            return pl.DataFrame(schema=RUNS_SCHEMA)
        if self._runs is not None or RUNS not in self.manifest.versions:
            return self.run_frame().filter(pl.col("run").is_in(list(ids)))
        dt = self._table(RUNS)  # loaded once: the commit writes it next
        version = self.manifest.versions[RUNS]
        if dt.version() != version:
            dt = DeltaTable(self.root / RUNS, version=version)
        # Delta prunes the files by partition and statistics; this store writes no deletion
        # vectors, so the files' rows are the table's.
        files = dt.file_uris(file_pruning_predicate=_predicate(ids, self.manifest.buckets))
        if not files:
            return pl.DataFrame(schema=RUNS_SCHEMA)
        found = pl.scan_parquet(files).filter(pl.col("run").is_in(list(ids)))
        return found.select(pl.col(c).cast(t) for c, t in RUNS_SCHEMA.items()).collect()

    def commit(self, current: pl.DataFrame, *, drop_missing: bool = True) -> bool:
        """Settle the store on ``current`` (every run found, all of them recorded already: a frame
        of run, path, hash and files as in RUNS_SCHEMA): runs no longer found are dropped (unless
        not ``drop_missing``: runs added to the store, the others left as they are), runs moved
        or whose files were touched get their path and stamps updated. Writes nothing when
        nothing changed; returns whether it wrote."""
        rows = self.run_frame() if drop_missing else self.rows_of(current["run"].to_list())
        both = current.join(rows.select("run", "path", "hash", "files"), on="run", how="left", suffix="_stored")
        unrecorded = both.filter(pl.col("hash_stored").is_null() | (pl.col("hash") != pl.col("hash_stored")))
        if not unrecorded.is_empty():
            raise InputError(f"run {unrecorded['run'][0]} was not recorded before the commit", path=str(self.root),
                             hint="record every analysed run before committing (a bug in the caller)")
        touched = pl.col("files").ne_missing(pl.col("files_stored"))
        moved = both.filter((pl.col("path") != pl.col("path_stored")) | touched)
        gone = rows.filter(~pl.col("run").is_in(current["run"].implode()))["run"].to_list()
        return self.record([RunRecord(rid, path, h, None, files=pl.DataFrame(files, schema=STAMP_FIELDS))
                            for rid, path, h, files in moved.select("run", "path", "hash", "files").iter_rows()],
                           drop=gone)

    def compact(self, *, force: bool = False) -> bool:
        """Merge the files of each bucket of each table that holds more than COMPACT_AT of them
        (more than one with ``force``), record the new versions, then delete files no version
        since RETENTION_HOURS needs. Returns whether anything was compacted."""
        m = self.manifest
        new = Manifest(m.generation, dict(m.versions), m.buckets, m.runs)
        for name in m.versions:
            dt = self._table(name)
            counts = pl.DataFrame(dt.get_add_actions(flatten=True)).group_by("partition.bucket").len()
            over = counts.filter(pl.col("len") > (1 if force else COMPACT_AT))["partition.bucket"]
            if over.len():
                dt.optimize.compact(partition_filters=[("bucket", "in", [str(b) for b in over])])
                new.versions[name] = dt.version()
        if new.versions == m.versions:
            return False
        self._settle(new)
        return True

    def rebucket(self, buckets: int | None = None) -> bool:
        """Rewrite every table with ``buckets`` partitions (default: ``bucket_count`` of the runs
        stored) when that is not the current count: one transaction per table, then the manifest.
        Returns whether it rewrote."""
        m = self.manifest
        buckets = buckets or bucket_count(m.runs)
        if buckets == m.buckets or not m.versions:
            return False
        new = Manifest(m.generation, dict(m.versions), buckets, m.runs)
        for name in m.versions:
            frame = pl.read_delta(str(self.root / name), version=m.versions[name]).drop("bucket")
            dt = self._table(name)
            write_deltalake(dt, _with_bucket(frame, buckets).to_arrow(), mode="overwrite", partition_by=["bucket"],
                            commit_properties=CommitProperties(custom_metadata={"buckets": str(buckets)}))
            new.versions[name] = dt.version()
        self._settle(new)
        return True

    def files(self, table: str) -> int:
        """How many data files the table's current version has (what compaction bounds)."""
        if table not in self.manifest.versions:
            return 0
        return len(DeltaTable(self.root / table, version=self.manifest.versions[table]).file_uris())

    def _write(self, name: str, rows: pl.DataFrame, redo: Collection[str], new: Manifest) -> None:
        """One transaction on table ``name``: delete the rows of runs ``redo``, add ``rows``."""
        exists = name in self.manifest.versions
        if not redo and rows.is_empty() and exists:
            return  # nothing to add or take away: the table keeps its version
        path = self.root / name
        data = _with_bucket(rows, new.buckets).to_arrow()
        props = CommitProperties(custom_metadata={"generation": str(new.generation)})
        if not exists:
            write_deltalake(path, data, mode="append", partition_by=["bucket"], commit_properties=props,
                            configuration=TABLE_CONFIG)
            new.versions[name] = self._table(name).version()
            return
        dt = self._table(name)
        if redo:
            # The predicate names the new rows' runs too: Delta checks added rows against it.
            where = _predicate({*redo, *rows["run"]}, new.buckets)
            write_deltalake(dt, data, mode="overwrite", predicate=where, partition_by=["bucket"],
                            commit_properties=props)
        else:
            write_deltalake(dt, data, mode="append", partition_by=["bucket"], commit_properties=props)
        new.versions[name] = dt.version()

    def _table(self, name: str) -> DeltaTable:
        if name not in self._tables:
            self._tables[name] = DeltaTable(self.root / name)
        return self._tables[name]

    def _settle(self, new: Manifest) -> None:
        """After compacting or re-bucketing: the manifest, then files no longer needed deleted."""
        self._commit_manifest(new)
        self._vacuum()
        vacuumed = {name: self._table(name).version() for name in new.versions}
        if vacuumed != new.versions:  # vacuum commits too: name them, so the next open loads nothing
            self._commit_manifest(Manifest(new.generation, vacuumed, new.buckets, new.runs))

    def _commit_manifest(self, new: Manifest) -> None:
        write_text(new.to_json(), self.root / MANIFEST)
        self.manifest = new

    def _vacuum(self) -> None:
        for name in self.manifest.versions:
            dt = self._table(name)
            if dt.vacuum(RETENTION_HOURS, dry_run=True, enforce_retention_duration=False):
                dt.vacuum(RETENTION_HOURS, dry_run=False, enforce_retention_duration=False)

    # -- pages --

    def page_dir(self, run_hash: str) -> Path:
        """Where older stores kept a run's pages (by content hash): still linked, and cleaned up."""
        return self.root / PARTS / run_hash

    def run_pages(self, run_id: str) -> Path | None:
        """The folder holding the run's pages, if it has one."""
        for name in _page_names(run_id):
            if _owner(self.root / PARTS / name) == run_id:
                return self.root / PARTS / name
        return None

    def _claim_pages(self, run_id: str) -> Path:
        """The run's page folder, made (and marked as the run's) when it has none: its folder name,
        or that name with a short hash of the run id when another run holds it."""
        found = self.run_pages(run_id)
        if found is not None:
            return found
        for name in _page_names(run_id):
            d = self.root / PARTS / name
            if not d.exists():
                d.mkdir(parents=True)
                write_text(run_id + "\n", d / OWNER)
                return d
        raise InputError(f"no free folder for the pages of run {run_id}", path=str(self.root / PARTS),
                         hint="remove the folders under reports/ that no run owns (a .run file names the owner)")

    def _write_pages(self, r: RunRecord) -> str:
        """The run's pages written into its folder (whose name is returned). A page replacing one
        is written aside (``PENDING``) and takes its place once the run's new rows are committed:
        a crash before leaves the committed rows with their page."""
        d = self._claim_pages(r.id)
        for name, text in r.pages.items():
            write_text(text, d / f".{name}.{r.hash}{PENDING}" if (d / name).exists() else d / name)
        return d.name

    def _publish_pages(self, hashes: Mapping[str, str]) -> None:
        """Put the pending pages of these runs (run id -> the hash now stored) in place; pages of
        another hash (an analysis never committed) are deleted."""
        for rid, h in hashes.items():
            d = self.run_pages(rid)
            if d is None:
                continue
            for pending in d.glob(f".*{PENDING}"):
                page, _, rest = pending.name[1:].removesuffix(PENDING).rpartition(".")
                if rest == h:
                    os.replace(pending, d / page)
                else:
                    pending.unlink(missing_ok=True)

    def _drop_pages(self, hashes: Iterable[str]) -> None:
        for h in hashes:
            shutil.rmtree(self.page_dir(h), ignore_errors=True)

    def _sweep_pages(self) -> None:
        """Delete pages of runs no longer stored (a crash between writing them and the manifest)
        and settle pending ones by the hash stored."""
        pages = self.root / PARTS
        if pages.is_dir():
            stored = dict(zip(self.run_frame()["run"], self.run_frame()["hash"], strict=True))
            keep = set(stored.values())
            owners = {d: _owner(d) for d in pages.iterdir()}
            for d, owner in owners.items():
                if owner is None and d.name not in keep or owner is not None and owner not in stored:
                    shutil.rmtree(d, ignore_errors=True)
            self._publish_pages({o: stored[o] for o in owners.values() if o is not None and o in stored})
        for f in self.root.glob(".*.tmp"):
            f.unlink(missing_ok=True)

    # -- healing --

    def _heal(self) -> bool:
        """Put every table back to the manifest's version when a crash left it ahead, and delete
        tables a first commit created but never committed. Returns whether anything was healed."""
        healed = False
        versions = dict(self.manifest.versions)
        for name in DELTA_TABLES:
            path = self.root / name
            want = self.manifest.versions.get(name)
            if not (path / "_delta_log").is_dir():
                if want is not None:
                    raise InputError(f"the manifest names the table {name!r}, which is missing", path=str(path),
                                     hint="delete the store (or point -o at a new directory) to rebuild it")
                continue
            if want is None:
                shutil.rmtree(path)
                healed = True
                continue
            if not (path / "_delta_log" / f"{want + 1:020d}.json").exists():
                continue  # nothing committed after the manifest's version (one stat, no table loaded)
            dt = self._table(name)
            if _changed_since(dt, want):
                dt.restore(want)
            versions[name] = dt.version()  # the manifest's rows (restored), or them compacted or vacuumed
            healed = True
        if versions != self.manifest.versions:  # so that the next open finds nothing ahead
            m = self.manifest
            self._commit_manifest(Manifest(m.generation, versions, m.buckets, m.runs))
        if healed or (self.root / COMMITTING).exists():
            self._sweep_pages()
            (self.root / COMMITTING).unlink(missing_ok=True)
            healed = True
        return healed


def _v1_record(part: Path, run: Mapping[str, Any]) -> RunRecord:
    """A format-1 part as a record: its tables, status and pages (the job report's link moved
    to where this format keeps it). No file stamps: the next run reads the files once."""
    tables = RunTables(*(pl.read_parquet(part / f"{t}.parquet") for t in TABLES))
    link = f"{PARTS}/{run['hash']}/report.html"
    tables.jobs = tables.jobs.with_columns(
        pl.when(pl.col("report").is_not_null()).then(pl.lit(link)).otherwise(None).alias("report"))
    status = json.loads((part / "status.json").read_text())
    pages = {f.name: f.read_text(encoding="utf-8") for f in sorted(part.glob("*.html"))}
    return RunRecord(run["id"], run["path"], run["hash"], tables, status, pages)


def page_name(run_id: str) -> str:
    """A run's page folder name for people: the last part of its id (its folder's name), in
    letters, digits and ``._-`` only (other characters become ``_``), at most 80 characters."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id.rstrip("/").rsplit("/", 1)[-1])[:80].strip("._")
    return name or "run"


def _page_names(run_id: str) -> tuple[str, str]:
    """The folder names a run's pages may take: its name, then, when another run holds that, the
    name with a short hash of the run id (unique: run ids are)."""
    name = page_name(run_id)
    return name, f"{name}-{hashlib.blake2b(run_id.encode(), digest_size=4).hexdigest()}"


def _owner(folder: Path) -> str | None:
    """The run whose pages ``folder`` holds (None: an older store's folder, by hash, or none)."""
    try:
        return (folder / OWNER).read_text(encoding="utf-8").rstrip("\n")
    except (FileNotFoundError, NotADirectoryError):
        return None


def _linked(jobs: pl.DataFrame, run_hash: str, folder: str | None) -> pl.DataFrame:
    """A run's jobs, their report links moved from the content-hash folder the analysis names
    (``reports/<hash>/``) to the run's page folder."""
    if folder is None:
        return jobs
    old, new = f"{PARTS}/{run_hash}/", f"{PARTS}/{folder}/"
    return jobs.with_columns(pl.col("report").str.replace(old, new, literal=True))


def _changed_since(dt: DeltaTable, version: int) -> bool:
    """Whether a commit after ``version`` changed the table's rows."""
    newer = dt.history(dt.version() - version)
    return any(h.get("operation") not in NO_DATA_CHANGE for h in newer if h.get("version", version + 1) > version)


def _with_bucket(frame: pl.DataFrame, buckets: int) -> pl.DataFrame:
    of = {r: bucket(r, buckets) for r in frame["run"].unique()}
    return frame.with_columns(pl.col("run").replace_strict(of, default=0, return_dtype=pl.Int32).alias("bucket"))


def _sql(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _predicate(runs: Collection[str], buckets: int) -> str:
    """Rows of these runs, with their buckets named so Delta prunes the other partitions."""
    named = ", ".join(str(b) for b in sorted({bucket(r, buckets) for r in runs}))
    return f"bucket IN ({named}) AND run IN ({', '.join(_sql(r) for r in sorted(runs))})"


def _run_rows(batch: Sequence[RunRecord], stored: pl.DataFrame, generation: int) -> pl.DataFrame:
    """The runs table's rows of the batch; a run with no tables keeps its stored status and generation."""
    old = {r["run"]: r for r in stored.drop("files").filter(pl.col("run").is_in([r.id for r in batch]))
           .iter_rows(named=True)}
    rows = []
    for r in batch:
        before = old.get(r.id, {})
        status = r.status if r.tables is not None else before
        rows.append({
            "run": r.id, "path": r.path, "hash": r.hash, "error": status.get("error"),
            "notes": list(status.get("notes") or ()), "files_failed": int(status.get("files_failed") or 0),
            "generation": generation if r.tables is not None else before.get("generation", generation),
        })
    frame = pl.DataFrame(rows, schema={c: t for c, t in RUNS_SCHEMA.items() if c != "files"})
    return frame.with_columns(_files_column(batch)).select(RUNS_SCHEMA.names())


def _files_column(batch: Sequence[RunRecord]) -> pl.Series:
    """The batch's file stamps, one list per run (empty for a run with none)."""
    stamps = [r.files.select(STAMP_FIELDS.keys()).cast(STAMP_FIELDS) if r.files is not None
              else pl.DataFrame(schema=STAMP_FIELDS) for r in batch]
    lengths = pl.Series([len(f) for f in stamps], dtype=pl.Int64)
    values = pl.concat(stamps).to_struct("files") if stamps else pl.Series("files", [], STAMP)
    offsets = pl.concat([pl.Series([0], dtype=pl.Int64), lengths.cum_sum()])
    return pl.Series("files", [values.slice(o, n) for o, n in zip(offsets, lengths, strict=False)],
                     dtype=pl.List(STAMP))
