"""Input discovery: files, directories (recursive) and globs, in a stable order."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from toranalyze import storage
from toranalyze.errors import InputError, ToranalyzeError

# Files that are never logs: the simulator's answer key, our own outputs, VCS/OS litter.
SKIP_NAMES = frozenset({"truth.json", "summary.json", ".DS_Store", "README.md"})
SKIP_SUFFIXES = (".parquet", ".html", ".png", ".jpg", ".pyc", ".md")


@dataclass(frozen=True)
class InputFile:
    path: str  # as it will be shown to the user and stored in events.file
    size: int
    mtime: float


def _wanted(path: Path) -> bool:
    name = path.name
    if name in SKIP_NAMES or name.startswith("."):
        return False
    return not name.lower().endswith(SKIP_SUFFIXES)


def _walk(root: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            yield Path(dirpath) / name


def _discover_url(spec: str) -> tuple[list[InputFile], list[InputError]]:
    """A URL: one object, or every object under the prefix, by the rules of a local folder."""
    if glob.has_magic(storage.key_of(spec)):
        return [], [InputError("wildcards are not expanded in URLs", path=spec,
                               hint="give the prefix (a folder) or the object itself")]
    try:
        found = storage.stat(spec)
        if found is None:
            return [], [storage.missing(spec)]
        if not found.is_dir:
            return [InputFile(storage.normalize(spec), found.size, found.mtime)], []
        entries = storage.list_files(storage.normalize(spec))
    except ToranalyzeError as exc:
        return [], [InputError(exc.message, path=spec, hint=exc.hint)]
    files = [InputFile(e.path, e.size, e.mtime) for e in entries if _wanted(Path(storage.key_of(e.path)))]
    if not files:
        return [], [InputError("matched no files", path=spec, hint="check the prefix")]
    return files, []


def discover(paths: Iterable[str]) -> tuple[list[InputFile], list[InputError]]:
    """Expand inputs (paths, globs or URLs); return the files and one error per input that matched nothing."""
    files: list[InputFile] = []
    problems: list[InputError] = []
    seen: set[str] = set()
    for spec in paths:
        if storage.is_url(spec):
            found, failed = _discover_url(spec)
            problems.extend(failed)
            files.extend(f for f in found if f.path not in seen)
            seen.update(f.path for f in found)
            continue
        matches: list[Path]
        p = Path(spec)
        if p.is_dir():
            matches = [f for f in _walk(p) if _wanted(f)]
        elif p.exists():
            matches = [p]
        elif glob.has_magic(spec):
            matches = [Path(m) for m in sorted(glob.glob(spec, recursive=True))]
            matches = [f for m in matches for f in (_walk(m) if m.is_dir() else [m]) if _wanted(f)]
        else:
            problems.append(InputError("no such file or directory", path=spec, hint="check the path"))
            continue
        if not matches:
            problems.append(InputError("matched no files", path=spec, hint="check the glob or directory"))
        for m in matches:
            key = os.path.normpath(str(m))
            if key in seen:
                continue
            seen.add(key)
            try:
                st = m.stat()
            except OSError as exc:
                problems.append(InputError(f"cannot stat: {exc.strerror}", path=str(m)))
                continue
            files.append(InputFile(str(m), st.st_size, st.st_mtime))
    return files, problems
