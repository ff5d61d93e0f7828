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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from toranalyze.errors import InputError
from toranalyze.ingest.discover import _wanted

CHUNK = 1 << 20


@dataclass(frozen=True)
class Run:
    id: str  # stable name in the store
    path: str  # where it was found (normalized, as given)
    files: tuple[str, ...]  # paths relative to ``path``, sorted


def _log_files(d: Path, skip: frozenset[Path]) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(d):
        dirnames[:] = sorted(
            x for x in dirnames if not x.startswith(".") and (Path(dirpath) / x).resolve() not in skip
        )
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if _wanted(p) and p.is_file():
                out.append(p.relative_to(d).as_posix())
    return sorted(out)


def _runs_under(d: Path, rel: str, skip: frozenset[Path]) -> Iterable[tuple[str, Path]]:
    if d.resolve() in skip:
        return
    entries = sorted(os.scandir(d), key=lambda e: e.name)
    if any(e.is_file() and not e.name.startswith(".") and _wanted(Path(e.path)) for e in entries):
        yield rel, d
        return
    for e in entries:
        if e.is_dir() and not e.name.startswith("."):
            yield from _runs_under(Path(e.path), f"{rel}/{e.name}", skip)


def find_runs(paths: Sequence[str], skip: Iterable[str] = ()) -> list[Run]:
    """Expand input paths into runs, sorted by id. ``skip``: directories never entered (the store).

    Raises InputError for a path that does not exist or holds no run, and for two runs that
    would get one id."""
    skipped = frozenset(Path(s).resolve() for s in skip)
    runs: dict[str, Run] = {}
    for spec in paths:
        p = Path(os.path.normpath(spec))
        if not p.exists():
            raise InputError("no such file or directory", path=spec, hint="check the path")
        name = p.resolve().name
        found: list[tuple[str, Path]]
        if p.is_file():
            found = [(name, p)]
        else:
            found = list(_runs_under(p, name, skipped))
        if not found:
            raise InputError("holds no log file", path=spec, hint="give a run directory or a directory of runs")
        for rid, d in found:
            files = (d.name,) if d.is_file() else tuple(_log_files(d, skipped))
            run = Run(rid, str(d.parent if d.is_file() else d), files)
            if rid in runs and os.path.realpath(runs[rid].path) != os.path.realpath(run.path):
                raise InputError(
                    f"two runs would both be called {rid!r}: {runs[rid].path} and {run.path}",
                    path=spec,
                    hint="give the two roots different names (or link them under different names)",
                )
            runs[rid] = run
    return [runs[k] for k in sorted(runs)]


def run_files(run: Run) -> list[str]:
    """The run's files as paths ``ingest`` reads (the run directory joined with each file)."""
    return [os.path.join(run.path, f) for f in run.files]


def content_hash(run: Run, salt: str = "") -> str:
    """A digest of the run's id, every file's relative path, size and bytes, and ``salt`` (the
    analysis options and version): equal digests mean the analysis would give equal tables."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{salt}\0{run.id}\0".encode())
    for rel in run.files:
        fh = hashlib.blake2b(digest_size=16)
        size = 0
        with open(os.path.join(run.path, rel), "rb") as f:
            while chunk := f.read(CHUNK):
                fh.update(chunk)
                size += len(chunk)
        h.update(f"{rel}\0{size}\0".encode() + fh.digest())
    return h.hexdigest()
