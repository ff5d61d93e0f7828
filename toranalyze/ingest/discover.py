"""Input discovery: files, directories (recursive) and globs, in a stable order."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from toranalyze.errors import InputError

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


def discover(paths: Iterable[str]) -> tuple[list[InputFile], list[InputError]]:
    """Expand inputs; return the files and one error per path that matched nothing."""
    files: list[InputFile] = []
    problems: list[InputError] = []
    seen: set[str] = set()
    for spec in paths:
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
