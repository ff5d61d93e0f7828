"""Run discovery: which directories are runs, and each run's files with their size and mtime.

The rule (docs/fleet.md): a directory that holds at least one log file directly is **one run**,
with every log file beneath it (per-node ``nodes/<host>/kern.log``, ``logs/``, ``pods/`` are
part of it). A directory that holds only sub-directories is a directory of runs: each
sub-directory is examined by the same rule. A file given by name is a run of its own. Files that
are never logs (``truth.json``, our own outputs, hidden files) do not count, as in ``analyze``.

A run's id is its path relative to the parent of the input root it was found under
(``fleet/fleet-003``; the root's own name when the root is the run), so the id does not depend
on how the path was spelled, and two roots with runs of the same name stay apart.

Each file is stat-ed once, while its folder is walked: its size and mtime go into the listing
(``Listed.files``), which is what tells a re-run which files changed (fleet/stamps.py). A folder
of many runs is walked by several worker processes, each taking a share of its sub-folders.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import polars as pl

from toranalyze import storage
from toranalyze.errors import InputError
from toranalyze.ingest.discover import folder_error, os_reason, printable, refused, unreadable, wanted, wanted_name
from toranalyze.ingest.engine import map_ordered
from toranalyze.schema import frame_schema

# A folder of at least this many sub-folders is walked by the worker processes, in about
# SHARES_PER_JOB shares per worker (small enough to balance, large enough to pay for the hand-off).
PARALLEL_AT = 2000
SHARES_PER_JOB = 4

# One row per file of every run found, in the runs' order and each run's files sorted: ``size``
# and ``mtime_ns`` as stat-ed while listing (null when not yet known: a URL, or a file that could
# not be stat-ed, ``error`` then saying why).
LISTED_SCHEMA = frame_schema({
    "run": pl.String, "name": pl.String, "size": pl.Int64, "mtime_ns": pl.Int64, "error": pl.String,
})


@dataclass(frozen=True)
class Run:
    id: str  # stable name in the store
    path: str  # where it was found (normalized, as given)
    files: tuple[str, ...]  # paths relative to ``path``, sorted


class Listed(NamedTuple):
    runs: list[Run]  # sorted by id
    files: pl.DataFrame  # LISTED_SCHEMA, in the runs' order


Shelf = tuple[list[str], list[str], pl.DataFrame]  # runs listed: (ids, folders, files: LISTED_SCHEMA)
# A file found: (path relative to the run folder, size, mtime_ns, why it could not be stat-ed)
FileRow = tuple[str, int | None, int | None, str | None]


class _Found:
    """Runs listed, by columns: each run's id, folder and number of files, and every file's row."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.paths: list[str] = []
        self.counts: list[int] = []
        self.names: list[str] = []
        self.sizes: list[int | None] = []
        self.mtimes: list[int | None] = []
        self.errors: list[str | None] = []

    def add(self, rid: str, path: str, rows: list[FileRow]) -> None:
        self.ids.append(rid)
        self.paths.append(path)
        self.counts.append(len(rows))
        for name, size, mtime, error in rows:
            self.names.append(name)
            self.sizes.append(size)
            self.mtimes.append(mtime)
            self.errors.append(error)

    def listed(self) -> Shelf:
        """(ids, folders, their files' rows as LISTED_SCHEMA) of the runs added."""
        runs = pl.DataFrame({"run": self.ids, "n": self.counts}, schema={"run": pl.String, "n": pl.Int64})
        run = runs.select(pl.col("run").repeat_by("n")).explode("run").drop_nulls()["run"]
        frame = pl.DataFrame({"run": run, "name": self.names, "size": self.sizes, "mtime_ns": self.mtimes,
                              "error": self.errors}, schema=LISTED_SCHEMA)
        return self.ids, self.paths, frame


def _log_files(d: str, real: str, skip: frozenset[str], problems: list[InputError],
               entries: list[os.DirEntry[str]] | None = None) -> list[FileRow]:
    """Every log file below the run folder ``d`` (sorted by relative path), as ``os.walk`` finds
    them (no symlinked folder entered), walked with strings: a Path per file cost more than the
    listing itself on a fleet of many runs. ``real``: its real path; ``entries``: its own
    entries, when already listed."""
    out: list[FileRow] = []
    _walk_files(d, "", real, skip, (out, problems), entries)
    out.sort()  # (relative paths are unique: the sort is by them)
    return out


def _walk_files(folder: str, rel: str, real: str, skip: frozenset[str],
                into: tuple[list[FileRow], list[InputError]], entries: list[os.DirEntry[str]] | None = None) -> None:
    out, problems = into
    if entries is None:
        try:
            with os.scandir(folder) as it:
                entries = list(it)  # (in the folder's order: the files are sorted once, at the end)
        except OSError as exc:
            problems.append(folder_error(exc))
            return
    plain_name = folder.isascii() or printable(folder) == folder  # (then a file's own name decides)
    for e in sorted(entries, key=_name) if any(not _plain(e) for e in entries) else entries:
        name = e.name
        try:
            is_dir = e.is_dir()  # (a symlink counts by its target, as in os.walk)
        except OSError:
            is_dir = False
        if is_dir:
            if not name.startswith(".") and not e.is_symlink() and os.path.join(real, name) not in skip:
                _walk_files(e.path, f"{rel}{name}/", os.path.join(real, name), skip, into)
        elif wanted_name(name) and (row := _file_row(e, rel + name, plain_name, problems)) is not None:
            out.append(row)


def _file_row(e: os.DirEntry[str], rel: str, plain_folder: bool, problems: list[InputError]) -> FileRow | None:
    """The file's row, stat-ed (through a symlink); None, the reason recorded, for a file never
    read: a special file, a name that is not UTF-8, a dangling link or a loop. A plain file that
    vanished since its folder was listed stays, with the reason: the run counts it unreadable."""
    try:
        st = e.stat()
    except OSError as exc:
        if _plain(e) and printable(e.path) == e.path:
            return rel, None, None, os_reason(exc)
        problems.append(unreadable(e.path, exc))
        return None
    if stat.S_ISREG(st.st_mode) and plain_folder and (e.name.isascii() or printable(e.name) == e.name):
        return rel, st.st_size, st.st_mtime_ns, None
    problem = refused(e.path, st.st_mode)
    if problem is not None:
        problems.append(problem)
        return None
    return rel, st.st_size, st.st_mtime_ns, None


def _name(e: os.DirEntry[str]) -> str:
    return e.name


def _plain(e: os.DirEntry[str]) -> bool:
    """A plain file or folder: nothing about it can become a problem to record."""
    try:
        return e.is_file(follow_symlinks=False) or e.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _readable_entry(e: os.DirEntry[str], problems: list[InputError]) -> bool:
    """Whether a folder entry is a file to read (no stat for a plain regular file with a UTF-8
    name); else the reason is recorded."""
    if e.is_file(follow_symlinks=False) and printable(e.path) == e.path:
        return True
    try:
        problem = refused(e.path, os.stat(e.path).st_mode)
    except OSError as exc:  # a symlink loop, a dangling link, a file gone
        problem = unreadable(e.path, exc)
    if problem is not None:
        problems.append(problem)
    return problem is None


def _kind(e: os.DirEntry[str], problems: list[InputError]) -> str | None:
    """"file" or "dir" for an entry of a folder of runs, or None (hidden, special, broken: the
    reason recorded when it is not merely hidden)."""
    if e.name.startswith("."):
        return None
    try:
        if e.is_dir():
            if printable(e.path) == e.path:
                return "dir"
            problems.append(InputError("the folder name is not valid UTF-8; skipped", path=printable(e.path),
                                       hint="rename the folder (e.g. with convmv) and run again"))
            return None
    except OSError as exc:
        problems.append(unreadable(e.path, exc))
        return None
    return "file" if wanted_name(e.name) and _readable_entry(e, problems) else None


@functools.lru_cache(maxsize=4096)
def _real_folder(path: str) -> str:
    return os.path.realpath(path)


def _realpath(path: str) -> str:
    """``os.path.realpath`` with the folder a link leads into resolved once for all its links
    (a fleet of linked runs: one readlink and one lstat per run, not one lstat per component)."""
    try:
        target = os.readlink(path)
    except OSError:  # not a link
        return os.path.realpath(path)
    head, tail = os.path.split(os.path.join(os.path.dirname(path), target))
    if tail in ("", ".", "..") or os.path.islink(joined := os.path.join(_real_folder(head), tail)):
        return os.path.realpath(path)
    return joined


# A run found: (id, folder, the folder's entries, its real path); a folder to search: (folder, id
# prefix, real path when known)
Found = tuple[str, str, list[os.DirEntry[str]], str]
Sub = tuple[str, str, str | None]


def _folder(d: str, rel: str, skip: frozenset[str], problems: list[InputError], above: frozenset[str],
            real: str | None) -> tuple[Found | None, list[Sub], frozenset[str]]:
    """One step of the search: ``d`` as a run, or its sub-folders to search (and the folders
    above them). ``real``: ``d``'s real path when known (a folder that is no symlink, below a
    folder whose real path is known: resolving every folder again cost a stat per component)."""
    real = _realpath(d) if real is None else real
    if real in skip:
        return None, [], above
    if real in above:  # a symlink back to a folder being searched: following it never ends
        problems.append(InputError("a symlink loop (it leads back to a folder above it); skipped",
                                   path=printable(d)))
        return None, [], above
    try:
        entries = sorted(os.scandir(d), key=_name)
    except OSError as exc:
        problems.append(folder_error(exc))
        return None, [], above
    unread: list[InputError] = []  # a run's own files are checked again, with the rest of it
    kinds = [(e, _kind(e, unread)) for e in entries]
    if any(k == "file" for _, k in kinds):
        return (rel, d, entries, real), [], above
    problems.extend(unread)
    subs = [(e.path, f"{rel}/{e.name}", None if e.is_symlink() else os.path.join(real, e.name))
            for e, k in kinds if k == "dir"]
    return None, subs, above | {real}


def _runs_under(d: str, rel: str, skip: frozenset[str], problems: list[InputError],
                above: frozenset[str] = frozenset(), real: str | None = None) -> Iterable[Found]:
    """Every run at or below ``d``."""
    found, subs, above = _folder(d, rel, skip, problems, above, real)
    if found is not None:
        yield found
    for sub, sub_rel, sub_real in subs:
        yield from _runs_under(sub, sub_rel, skip, problems, above, sub_real)


def _listed(found: Iterable[Found], skip: frozenset[str], problems: list[InputError]) -> _Found:
    out = _Found()
    for rid, d, entries, real in found:
        out.add(rid, d, _log_files(d, real, skip, problems, entries))
    return out


Share = tuple[list[Sub], frozenset[str], frozenset[str]]


def _list_share(share: Share) -> tuple[Shelf, list[InputError]]:
    """The runs below a share of a folder's sub-folders, in a worker process."""
    subs, skip, above = share
    problems: list[InputError] = []
    found = (f for sub, rel, real in subs for f in _runs_under(sub, rel, skip, problems, above, real))
    return _listed(found, skip, problems).listed(), problems


def _folder_runs(p: str, name: str, skip: frozenset[str], problems: list[InputError], jobs: int) -> list[Shelf]:
    """The runs at or below the folder ``p``; a folder of many sub-folders is walked in shares by
    ``jobs`` worker processes (the same runs and problems, in the same order)."""
    found, subs, above = _folder(p, name, skip, problems, frozenset(), None)
    if found is not None:
        return [_listed([found], skip, problems).listed()]
    if jobs <= 1 or len(subs) < PARALLEL_AT:
        found_all = (f for sub, rel, real in subs for f in _runs_under(sub, rel, skip, problems, above, real))
        return [_listed(found_all, skip, problems).listed()]
    n = jobs * SHARES_PER_JOB
    size = -(-len(subs) // n)  # (ceiling division: contiguous shares keep the order)
    out: list[Shelf] = []
    for listing, found_problems in map_ordered(_list_share, [(subs[i:i + size], skip, above)
                                                             for i in range(0, len(subs), size)], "local", jobs):
        out.append(listing)
        problems.extend(found_problems)
    return out


def _no_run(spec: str, path: str, unread: Sequence[InputError]) -> InputError:
    """Why ``spec`` (at ``path``) gave no run: it, or everything below it, could not be read (the
    first reason, e.g. permission denied), or it holds no log file."""
    if not unread:
        return InputError("holds no log file", path=spec, hint="give a run directory or a directory of runs")
    first = unread[0]
    reason = first.message.removesuffix("; skipped")
    if first.path == printable(path):  # the folder given itself
        return InputError(reason, path=spec, hint=first.hint)
    more = f" and {len(unread) - 1} more" if len(unread) > 1 else ""
    return InputError(f"holds no readable log file ({first.path}: {reason}{more})", path=spec, hint=first.hint)


def _url_runs(spec: str, skip: Sequence[str]) -> _Found:
    """The runs under a URL, by the rule of local folders applied to the keys under the prefix
    (their files' stamps are taken when they are hashed)."""
    url = storage.normalize(spec)
    found = storage.stat(url)
    if found is None:
        raise storage.missing(spec)
    name = storage.name(url)
    out = _Found()
    if not found.is_dir:
        out.add(name, storage.parent(url), [(name, None, None, None)])
        return out
    prefixes = tuple(storage.normalize(s) + "/" for s in skip if storage.is_url(s))
    rels = [e.path[len(url) + 1:] for e in storage.list_files(url)
            if not (e.path + "/").startswith(prefixes) and wanted(Path(storage.key_of(e.path)))]
    for rid, d, files in _group_runs(rels, name):
        out.add(rid, storage.join(url, d) if d else url, [(f, None, None, None) for f in sorted(files)])
    return out


def _group_runs(rels: list[str], rel: str, here: str = "") -> Iterable[tuple[str, str, list[str]]]:
    """(run id, folder relative to the root, files relative to the folder) of the folder ``here``
    given every file below it (``rels``, relative to it): the folder itself when it holds a file,
    else each sub-folder by the same rule."""
    if any("/" not in r for r in rels):
        yield rel, here, rels
        return
    subs: dict[str, list[str]] = {}
    for r in rels:
        head, _, tail = r.partition("/")
        subs.setdefault(head, []).append(tail)
    for sub in sorted(subs):
        yield from _group_runs(subs[sub], f"{rel}/{sub}", f"{here}/{sub}".lstrip("/"))


def _spec_runs(spec: str, skip: Sequence[str], skipped: frozenset[str], problems: list[InputError],
               jobs: int) -> list[Shelf]:
    if storage.is_url(spec):
        found = _url_runs(spec, skip)
        if not found.ids:
            raise InputError("holds no log file", path=spec, hint="give a run prefix or a prefix of runs")
        return [found.listed()]
    p = os.path.normpath(spec)
    if not os.path.exists(p):
        raise InputError("no such file or directory", path=spec, hint="check the path")
    name = os.path.basename(os.path.realpath(p))
    if os.path.isfile(p):  # a file given by name: a run of its own (stamped when hashed)
        one = _Found()
        one.add(name, os.path.dirname(p) or ".", [(os.path.basename(p), None, None, None)])
        return [one.listed()]
    before = len(problems)
    listings = _folder_runs(p, name, skipped, problems, jobs)
    if not any(ids for ids, _, _ in listings):
        raise _no_run(spec, p, problems[before:])
    return listings


def list_runs(paths: Sequence[str], skip: Iterable[str] = (), problems: list[InputError] | None = None,
              jobs: int = 1) -> Listed:
    """Expand input paths (or URLs) into runs, sorted by id, and their files (``Listed``).
    ``skip``: directories never entered (the store). Entries that cannot be read (folders
    denied, symlink loops, special files, names that are not UTF-8) are skipped, each with its
    reason appended to ``problems``. ``jobs``: worker processes for a folder of many runs.

    Raises InputError for a path that does not exist or holds no run, and for two runs that
    would get one id."""
    problems = [] if problems is None else problems
    skip = list(skip)
    skipped = frozenset(os.path.realpath(s) for s in skip if not storage.is_url(s))
    _real_folder.cache_clear()  # (links may have changed since the last listing)
    kept: dict[str, tuple[str, int]] = {}  # run id -> (folder, the listing it is taken from)
    listings: list[Shelf] = []
    for spec in paths:
        for listing in _spec_runs(spec, skip, skipped, problems, jobs):
            for rid, path in zip(listing[0], listing[1], strict=True):
                _add(kept, rid, path, spec, len(listings))
            listings.append(listing)
    return merged(listings, kept)


def merged(listings: Sequence[Shelf], kept: dict[str, tuple[str, int]]) -> Listed:
    """One listing of the runs kept, sorted by id, their files in the same order."""
    ids = sorted(kept)
    if [rid for found, _, _ in listings for rid in found] == ids:  # (each run once, in order: most builds)
        files = pl.concat([frame for _, _, frame in listings])
        return Listed(_runs(ids, [p for _, paths, _ in listings for p in paths], files), files)
    files = pl.concat([frame.with_columns(pl.lit(i, pl.Int32).alias("_from"))
                       for i, (_, _, frame) in enumerate(listings)])
    taken = pl.DataFrame({"run": ids, "_from": [kept[r][1] for r in ids]},
                         schema={"run": pl.String, "_from": pl.Int32})
    files = taken.join(files, on=["run", "_from"], how="inner", maintain_order="left").drop("_from")
    return Listed(_runs(ids, [kept[r][0] for r in ids], files), files.select(LISTED_SCHEMA.names()))


def _runs(ids: Sequence[str], paths: Sequence[str], files: pl.DataFrame) -> list[Run]:
    """The runs, each with its files' names (``files`` holds them in the runs' order)."""
    names = files["name"].to_list()
    counts = dict(zip(*files.group_by("run", maintain_order=True).len(), strict=True) if not files.is_empty() else {})
    runs, at = [], 0
    for rid, path in zip(ids, paths, strict=True):
        n = counts.get(rid, 0)
        runs.append(Run(rid, path, tuple(names[at:at + n])))
        at += n
    return runs


def find_runs(paths: Sequence[str], skip: Iterable[str] = (), problems: list[InputError] | None = None) -> list[Run]:
    """``list_runs``' runs alone."""
    return list_runs(paths, skip, problems).runs


def _add(kept: dict[str, tuple[str, int]], rid: str, path: str, spec: str, listing: int) -> None:
    if rid in kept and _real(kept[rid][0]) != _real(path):
        raise InputError(
            f"two runs would both be called {rid!r}: {kept[rid][0]} and {path}",
            path=spec,
            hint="give the two roots different names (or link them under different names)",
        )
    kept[rid] = (path, listing)


def _real(path: str) -> str:
    return storage.normalize(path) if storage.is_url(path) else os.path.realpath(path)


def run_files(run: Run) -> list[str]:
    """The run's files as paths (or URLs) ``ingest`` reads (the run directory joined with each file)."""
    return [storage.join(run.path, f) for f in run.files]
