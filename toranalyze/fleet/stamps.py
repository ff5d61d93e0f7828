"""Content hashes of runs, and the stamps that spare a re-run reading files that did not change.

A run's hash is a digest of the analysis options (the salt), its id, and each file's relative
path, size and bytes: equal hashes mean the analysis would give equal tables. Each file's bytes
enter through their own digest (blake2b-128), kept in the store with the file's size and mtime
(its stamp); a file whose size and mtime equal its stamp is not read again. A file that cannot
be read counts by its reason, so the run is analysed again once it can be.

All of it works on whole frames (``hash_runs``): matching a fleet's files against their stamps is
one join, and only the files that changed are read, one by one.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence

import polars as pl

from toranalyze import storage
from toranalyze.errors import InputError
from toranalyze.fleet.runs import LISTED_SCHEMA, Run
from toranalyze.ingest.discover import os_reason, printable
from toranalyze.schema import frame_schema

CHUNK = 1 << 20

# What a run's file looked like when it was last hashed: its size and modification time (ns) when
# read, and the digest of its bytes (blake2b-128, hex); ``name`` is relative to the run's folder.
STAMP_FIELDS = frame_schema({"name": pl.String, "size": pl.Int64, "mtime_ns": pl.Int64, "digest": pl.String})
STAMPS_SCHEMA = frame_schema({"run": pl.String, **STAMP_FIELDS})
# The stamps kept in a store, by file: the run folder's path and the file's name in it
KNOWN_SCHEMA = frame_schema({"path": pl.String, **STAMP_FIELDS})
# (files read so far, files to read)
Reading = Callable[[int, int], None]


def hash_runs(runs: Sequence[Run], files: pl.DataFrame, salt: str = "", known: pl.DataFrame | None = None,
              problems: list[InputError] | None = None, reading: Reading | None = None,
              ) -> tuple[dict[str, str], pl.DataFrame]:
    """Each run's content hash, and its files' stamps (STAMPS_SCHEMA, in ``files``' order).
    ``files``: the runs' files as listed (runs.LISTED_SCHEMA); ``known``: stamps from the last
    hashing (KNOWN_SCHEMA), whose files with the same size and mtime are not read again. Files
    that cannot be read are recorded in ``problems``."""
    paths = pl.DataFrame({"run": [r.id for r in runs], "path": [r.path for r in runs]},
                         schema={"run": pl.String, "path": pl.String})
    rows = _stat_missing(files.join(paths, on="run", how="left", maintain_order="left"))
    if known is not None and not known.is_empty():
        rows = rows.join(known, on=["path", "name", "size", "mtime_ns"], how="left", maintain_order="left")
    else:
        rows = rows.with_columns(pl.lit(None, pl.String).alias("digest"))
    rows = _read_missing(rows, reading)
    if problems is not None:
        bad = rows.filter(pl.col("error").is_not_null())
        problems.extend(InputError(f"cannot read: {reason}", path=printable(storage.join(path, name)),
                                   hint="check the file's permissions")
                        for path, name, reason in bad.select("path", "name", "error").iter_rows())
    return _run_hashes(paths, rows, salt), rows.filter(pl.col("error").is_null()).select(STAMPS_SCHEMA.names())


def _stat_missing(rows: pl.DataFrame) -> pl.DataFrame:
    """Sizes and mtimes of the files the listing did not stat (URLs, files given by name)."""
    return _fill(rows, pl.col("size").is_null(), _size_mtime, ("size", "mtime_ns", "error"))


def _read_missing(rows: pl.DataFrame, reading: Reading | None) -> pl.DataFrame:
    """Digests of the files no stamp covers, each file read (its size the bytes read)."""
    return _fill(rows, pl.col("digest").is_null(), _file_digest, ("size", "digest", "error"), reading)


def _fill(rows: pl.DataFrame, missing: pl.Expr, get: Callable[[str], tuple[object, object, object]],
          columns: tuple[str, str, str], progress: Reading | None = None) -> pl.DataFrame:
    """``rows`` with ``columns`` from ``get(path)`` where ``missing`` holds and no error was
    recorded: one call per such file (the system calls are per file anyway)."""
    todo = rows.select((missing & pl.col("error").is_null()).arg_true()).to_series()
    if todo.is_empty():
        return rows
    found = []
    for i, (p, n) in enumerate(rows[todo].select("path", "name").iter_rows(), 1):
        found.append(get(storage.join(p, n)))
        if progress:
            progress(i, todo.len())
    return _scatter(rows, todo, found, columns)


def _scatter(rows: pl.DataFrame, at: pl.Series, values: Sequence[tuple[object, object, object]],
             columns: tuple[str, str, str]) -> pl.DataFrame:
    """``rows`` with ``columns`` set from ``values`` at the row indexes ``at`` (an error leaves
    the other two as they were)."""
    new = pl.DataFrame(values, schema={c: rows.schema[c] for c in columns}, orient="row")
    for c in columns:
        keep = new[c] if c == "error" else pl.select(
            pl.when(new["error"].is_null()).then(new[c]).otherwise(rows[c].gather(at))).to_series()
        rows = rows.with_columns(rows[c].scatter(at, keep))
    return rows


def _run_hashes(paths: pl.DataFrame, rows: pl.DataFrame, salt: str) -> dict[str, str]:
    """Each run's digest, fed in hex by whole columns: the salt and id, then for each file its
    relative path and size and its digest's bytes, or its path and the reason it was unreadable."""
    def hexed(*parts: pl.Expr | str) -> pl.Expr:
        return pl.concat_str([p if isinstance(p, pl.Expr) else pl.lit(p) for p in parts]).str.encode("hex")

    ok = pl.col("error").is_null()
    piece = (pl.when(ok).then(pl.concat_str(hexed(pl.col("name"), "\0", pl.col("size").cast(pl.String), "\0"),
                                            pl.col("digest")))
             .otherwise(hexed(pl.col("name"), "\0unreadable\0", pl.col("error"))))
    files = rows.group_by("run", maintain_order=True).agg(piece.str.join("").alias("files"))
    fed = (paths.join(files, on="run", how="left", maintain_order="left")
           .select("run", pl.concat_str(hexed(pl.lit(salt), "\0", pl.col("run"), "\0"),
                                        pl.col("files").fill_null("")).alias("fed")))
    return {rid: hashlib.blake2b(bytes.fromhex(fed), digest_size=16).hexdigest() for rid, fed in fed.iter_rows()}


def hash_run(run: Run, salt: str = "", problems: list[InputError] | None = None,
             known: pl.DataFrame | None = None) -> tuple[str, pl.DataFrame]:
    """``hash_runs`` of one run, its files stat-ed here: its hash and its files' stamps."""
    files = pl.DataFrame({"run": [run.id] * len(run.files), "name": list(run.files)},
                         schema={"run": pl.String, "name": pl.String})
    files = files.with_columns(pl.lit(None, t).alias(c) for c, t in LISTED_SCHEMA.items() if c not in files.columns)
    hashes, stamps = hash_runs([run], files, salt, known, problems)
    return hashes[run.id], stamps


def content_hash(run: Run, salt: str = "", problems: list[InputError] | None = None) -> str:
    """``hash_run`` without stamps of an earlier hashing: every file is read."""
    return hash_run(run, salt, problems)[0]


def _size_mtime(path: str) -> tuple[int | None, int | None, str | None]:
    """(size, mtime in ns, None), or (None, None, why not) for a file that cannot be stat-ed."""
    try:
        if storage.is_url(path):
            found = storage.stat(path)
            if found is None:
                raise FileNotFoundError(2, "No such file or directory", path)
            return found.size, int(found.mtime * 1e9), None
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns, None
    except OSError as exc:
        return None, None, os_reason(exc)


def _file_digest(path: str) -> tuple[int | None, str | None, str | None]:
    """(bytes read, their blake2b-128 digest in hex, None), or (None, None, why not)."""
    fh = hashlib.blake2b(digest_size=16)
    size = 0
    try:
        with storage.open_input(path) as f:
            while chunk := f.read(CHUNK):
                fh.update(chunk)
                size += len(chunk)
    except OSError as exc:
        return None, None, os_reason(exc)
    return size, fh.hexdigest(), None
