"""Run discovery and content hashes: which directories are runs, and whether a run changed.

The rule (docs/fleet.md): a directory that holds at least one log file directly is **one run**,
with every log file beneath it (per-node ``nodes/<host>/kern.log``, ``logs/``, ``pods/`` are
part of it). A directory that holds only sub-directories is a directory of runs: each
sub-directory is examined by the same rule. A file given by name is a run of its own. Files that
are never logs (``truth.json``, our own outputs, hidden files) do not count, as in ``analyze``.

A run's id is its path relative to the parent of the input root it was found under
(``fleet/fleet-003``; the root's own name when the root is the run), so the id does not depend
on how the path was spelled, and two roots with runs of the same name stay apart.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from toranalyze import storage
from toranalyze.errors import InputError
from toranalyze.ingest.discover import folder_error, printable, refused, unreadable, wanted, wanted_name

CHUNK = 1 << 20


@dataclass(frozen=True)
class Run:
    id: str  # stable name in the store
    path: str  # where it was found (normalized, as given)
    files: tuple[str, ...]  # paths relative to ``path``, sorted


def _log_files(d: Path, skip: frozenset[Path], problems: list[InputError],
               entries: list[os.DirEntry[str]] | None = None, real: Path | None = None) -> list[str]:
    """Every log file below the run folder ``d`` (relative paths, sorted), as ``os.walk`` finds
    them (no symlinked folder entered), walked with strings: a Path per file cost more than the
    listing itself on a fleet of many runs. ``entries``, ``real``: ``d``'s own entries and real
    path, when already known."""
    out: list[str] = []
    where = os.path.realpath(d) if real is None else str(real)
    _walk_files(str(d), "", where, frozenset(map(str, skip)), (out, problems), entries)
    return sorted(out)


def _walk_files(folder: str, rel: str, real: str, skip: frozenset[str],
                into: tuple[list[str], list[InputError]], entries: list[os.DirEntry[str]] | None = None) -> None:
    out, problems = into
    if entries is None:
        try:
            with os.scandir(folder) as it:
                entries = list(it)  # (in the folder's order: the files are sorted once, at the end)
        except OSError as exc:
            problems.append(folder_error(exc))
            return
    for e in sorted(entries, key=_name) if any(not _plain(e) for e in entries) else entries:
        name = e.name
        try:
            is_dir = e.is_dir()  # (a symlink counts by its target, as in os.walk)
        except OSError:
            is_dir = False
        if is_dir:
            if not name.startswith(".") and not e.is_symlink() and os.path.join(real, name) not in skip:
                _walk_files(e.path, f"{rel}{name}/", os.path.join(real, name), skip, into)
        elif wanted_name(name) and _readable_entry(e, problems):
            out.append(rel + name)


def _name(e: os.DirEntry[str]) -> str:
    return e.name


def _plain(e: os.DirEntry[str]) -> bool:
    """A plain file or folder: nothing about it can become a problem to record."""
    try:
        return e.is_file(follow_symlinks=False) or e.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _readable_entry(e: os.DirEntry[str], problems: list[InputError]) -> bool:
    """``_readable`` for a folder entry: a plain regular file with a UTF-8 name needs no stat."""
    if e.is_file(follow_symlinks=False) and printable(e.path) == e.path:
        return True
    return _readable(Path(e.path), problems)


def _readable(p: Path, problems: list[InputError]) -> bool:
    """Whether ``p`` is a regular file with a UTF-8 name; else the reason is recorded."""
    try:
        problem = refused(str(p), p.stat().st_mode)
    except OSError as exc:  # a symlink loop, a dangling link, a file gone
        problem = unreadable(str(p), exc)
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


def _runs_under(d: Path, rel: str, skip: frozenset[Path], problems: list[InputError],
                above: frozenset[Path] = frozenset(), real: Path | None = None,
                ) -> Iterable[tuple[str, Path, list[os.DirEntry[str]], Path]]:
    """(id, folder, the folder's entries, its real path) of each run at or below ``d``. ``real``:
    ``d``'s real path when known (a folder that is no symlink, below a folder whose real path is
    known: resolving every folder again cost a stat per component)."""
    real = Path(os.path.realpath(d)) if real is None else real
    if real in skip:
        return
    if real in above:  # a symlink back to a folder being searched: following it never ends
        problems.append(InputError("a symlink loop (it leads back to a folder above it); skipped",
                                   path=printable(str(d))))
        return
    try:
        entries = sorted(os.scandir(d), key=lambda e: e.name)
    except OSError as exc:
        problems.append(folder_error(exc))
        return
    unread: list[InputError] = []  # a run's own files are checked again, with the rest of it
    kinds = [(e, _kind(e, unread)) for e in entries]
    if any(k == "file" for _, k in kinds):
        yield rel, d, entries, real
        return
    problems.extend(unread)
    for e, k in kinds:
        if k == "dir":
            yield from _runs_under(Path(e.path), f"{rel}/{e.name}", skip, problems, above | {real},
                                   None if e.is_symlink() else real / e.name)


def _no_run(spec: str, path: Path, unread: Sequence[InputError]) -> InputError:
    """Why ``spec`` (at ``path``) gave no run: it, or everything below it, could not be read (the
    first reason, e.g. permission denied), or it holds no log file."""
    if not unread:
        return InputError("holds no log file", path=spec, hint="give a run directory or a directory of runs")
    first = unread[0]
    reason = first.message.removesuffix("; skipped")
    if first.path == printable(str(path)):  # the folder given itself
        return InputError(reason, path=spec, hint=first.hint)
    more = f" and {len(unread) - 1} more" if len(unread) > 1 else ""
    return InputError(f"holds no readable log file ({first.path}: {reason}{more})", path=spec, hint=first.hint)


def _url_runs(spec: str, skip: Sequence[str]) -> list[Run]:
    """The runs under a URL, by the rule of local folders applied to the keys under the prefix."""
    url = storage.normalize(spec)
    found = storage.stat(url)
    if found is None:
        raise storage.missing(spec)
    name = storage.name(url)
    if not found.is_dir:
        return [Run(name, storage.parent(url), (name,))]
    prefixes = tuple(storage.normalize(s) + "/" for s in skip if storage.is_url(s))
    rels = [e.path[len(url) + 1:] for e in storage.list_files(url)
            if not (e.path + "/").startswith(prefixes) and wanted(Path(storage.key_of(e.path)))]
    return [Run(rid, storage.join(url, d) if d else url, tuple(sorted(files)))
            for rid, d, files in _group_runs(rels, name)]


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


def find_runs(paths: Sequence[str], skip: Iterable[str] = (),
              problems: list[InputError] | None = None) -> list[Run]:
    """Expand input paths (or URLs) into runs, sorted by id. ``skip``: directories never entered
    (the store). Entries that cannot be read (folders denied, symlink loops, special files,
    names that are not UTF-8) are skipped, each with its reason appended to ``problems``.

    Raises InputError for a path that does not exist or holds no run, and for two runs that
    would get one id."""
    problems = [] if problems is None else problems
    skip = list(skip)
    skipped = frozenset(Path(s).resolve() for s in skip if not storage.is_url(s))
    runs: dict[str, Run] = {}
    for spec in paths:
        if storage.is_url(spec):
            found_runs = _url_runs(spec, skip)
            if not found_runs:
                raise InputError("holds no log file", path=spec, hint="give a run prefix or a prefix of runs")
            for run in found_runs:
                _add(runs, run, spec)
            continue
        p = Path(os.path.normpath(spec))
        if not p.exists():
            raise InputError("no such file or directory", path=spec, hint="check the path")
        name = p.resolve().name
        found: list[tuple[str, Path, list[os.DirEntry[str]] | None, Path | None]]
        before = len(problems)
        if p.is_file():
            found = [(name, p, None, None)]
        else:
            found = list(_runs_under(p, name, skipped, problems))
        if not found:
            raise _no_run(spec, p, problems[before:])
        for rid, d, entries, real in found:
            if entries is None:  # a file given by name
                _add(runs, Run(rid, str(d.parent), (d.name,)), spec)
            else:
                _add(runs, Run(rid, str(d), tuple(_log_files(d, skipped, problems, entries, real))), spec)
    return [runs[k] for k in sorted(runs)]


def _add(runs: dict[str, Run], run: Run, spec: str) -> None:
    rid = run.id
    if rid in runs and _real(runs[rid].path) != _real(run.path):
        raise InputError(
            f"two runs would both be called {rid!r}: {runs[rid].path} and {run.path}",
            path=spec,
            hint="give the two roots different names (or link them under different names)",
        )
    runs[rid] = run


def _real(path: str) -> str:
    return storage.normalize(path) if storage.is_url(path) else os.path.realpath(path)


def run_files(run: Run) -> list[str]:
    """The run's files as paths (or URLs) ``ingest`` reads (the run directory joined with each file)."""
    return [storage.join(run.path, f) for f in run.files]


class FileStamp(NamedTuple):
    """What a run's file looked like when it was last hashed: its size and modification time
    (ns) when read, and the digest of its bytes. The store keeps one per file, so a re-run reads
    again only the files whose size or mtime changed. (A named tuple: a store of 100,000 runs
    makes 1.5 million of them, and a frozen dataclass costs several times as much to build.)"""

    name: str  # relative to the run's folder
    size: int
    mtime_ns: int
    digest: str  # blake2b-128 of the bytes, hex


Stamps = Mapping[str, FileStamp]  # a file's path (or URL) -> its stamp from the last hashing


def content_hash(run: Run, salt: str = "", problems: list[InputError] | None = None) -> str:
    """``hash_run`` without a cache of earlier digests: every file is read."""
    return hash_run(run, salt, problems)[0]


def hash_run(run: Run, salt: str = "", problems: list[InputError] | None = None,
             known: Stamps | None = None) -> tuple[str, tuple[FileStamp, ...]]:
    """A digest of the run's id, every file's relative path, size and bytes, and ``salt`` (the
    analysis options and version): equal digests mean the analysis would give equal tables; and
    the stamps of the files read. A file whose size and mtime equal its stamp in ``known`` is
    not read again (its stamped digest counts). A file that cannot be read counts by its reason
    (the run is analysed again once it can be), recorded in ``problems``."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{salt}\0{run.id}\0".encode())
    stamps = []
    for rel in run.files:
        path = storage.join(run.path, rel)
        try:
            stamp = _stamp(path, rel, (known or {}).get(path))
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            h.update(f"{rel}\0unreadable\0{reason}".encode())
            if problems is not None:
                problems.append(InputError(f"cannot read: {reason}", path=printable(path),
                                           hint="check the file's permissions"))
            continue
        h.update(f"{rel}\0{stamp.size}\0".encode() + bytes.fromhex(stamp.digest))
        stamps.append(stamp)
    return h.hexdigest(), tuple(stamps)


def _stamp(path: str, rel: str, before: FileStamp | None) -> FileStamp:
    """The file's stamp: ``before`` when its size and mtime did not change, else a fresh digest.
    The size and mtime are taken before reading, so a file changed while being read is read
    again next time."""
    size, mtime_ns = _size_mtime(path)
    if before is not None and (before.size, before.mtime_ns) == (size, mtime_ns):
        return before if before.name == rel else FileStamp(rel, size, mtime_ns, before.digest)
    read, digest = _file_digest(path)
    return FileStamp(rel, read, mtime_ns, digest)


def _size_mtime(path: str) -> tuple[int, int]:
    if storage.is_url(path):
        found = storage.stat(path)
        if found is None:
            raise FileNotFoundError(2, "No such file or directory", path)
        return found.size, int(found.mtime * 1e9)
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _file_digest(path: str) -> tuple[int, str]:
    """(bytes read, their blake2b-128 digest in hex)."""
    fh = hashlib.blake2b(digest_size=16)
    size = 0
    with storage.open_input(path) as f:
        while chunk := f.read(CHUNK):
            fh.update(chunk)
            size += len(chunk)
    return size, fh.hexdigest()
