"""Input discovery: files, directories (recursive) and globs, in a stable order."""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Callable, Iterable
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


def printable(text: str) -> str:
    """``text`` with the bytes of a non-UTF-8 file name (surrogate escapes) spelt ``\\xff``, so it
    can be printed, stored in a table or written to JSON."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


_SPECIAL = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"))


def special_file(mode: int) -> str | None:
    """What a file that is neither regular nor a folder is ("a FIFO"...), or None. Such files are
    never read: a FIFO blocks until someone writes, a device never ends."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((name for test, name in _SPECIAL if test(mode)), "not a regular file")


def refused(path: str, mode: int) -> InputError | None:
    """The reason a file found or named is not read (a special file, a name that is not UTF-8), or None."""
    kind = special_file(mode)
    if kind is not None:
        return InputError(f"not a regular file ({kind}); skipped", path=printable(path),
                          hint="copy what it holds into a regular file and give that")
    if printable(path) != path:
        return InputError("the file name is not valid UTF-8; skipped", path=printable(path),
                          hint="rename the file (e.g. with convmv) and run again")
    return None


def os_reason(exc: OSError) -> str:
    """Why a system call failed, in the words warnings use ("permission denied")."""
    return (exc.strerror or str(exc)).lower()


def unreadable(path: str, exc: OSError) -> InputError:
    """A file or folder entry that could not be read (a symlink loop, a dangling link, a file gone)."""
    return InputError(f"cannot read: {os_reason(exc)}; skipped", path=printable(path))


def folder_error(exc: OSError) -> InputError:
    """A folder that could not be listed, as the input problem to record."""
    reason = os_reason(exc)
    return InputError(f"cannot read the folder: {reason}; skipped", path=printable(str(exc.filename)),
                      hint="check the folder's permissions")


def wanted(path: Path) -> bool:
    return wanted_name(path.name)


def wanted_name(name: str) -> bool:
    """Whether a file of this name can be a log (not hidden, not one of our outputs or a truth file)."""
    if name in SKIP_NAMES or name.startswith("."):
        return False
    return not name.lower().endswith(SKIP_SUFFIXES)


def _walk(root: Path, on_error: Callable[[OSError], None]) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(root, onerror=on_error):
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
    files = [InputFile(e.path, e.size, e.mtime) for e in entries if wanted(Path(storage.key_of(e.path)))]
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
        found, failed = _discover_local(spec, seen)
        files.extend(found)
        problems.extend(failed)
    return files, problems


def _discover_local(spec: str, seen: set[str]) -> tuple[list[InputFile], list[InputError]]:
    """The regular files a local path, folder or glob names (``seen`` ones left out); special
    files, folders that cannot be listed and names that are not UTF-8 are recorded and skipped."""
    problems: list[InputError] = []
    matches: list[Path]
    p = Path(spec)

    def on_error(exc: OSError) -> None:
        problems.append(folder_error(exc))

    if p.is_dir():
        matches = [f for f in _walk(p, on_error) if wanted(f)]
    elif p.exists():
        matches = [p]
    elif glob.has_magic(spec):
        matches = [Path(m) for m in sorted(glob.glob(spec, recursive=True))]
        matches = [f for m in matches for f in (_walk(m, on_error) if m.is_dir() else [m]) if wanted(f)]
    else:
        return [], [InputError("no such file or directory", path=printable(spec), hint="check the path")]
    if not matches and not problems:
        problems.append(InputError("matched no files", path=printable(spec), hint="check the glob or directory"))
    files: list[InputFile] = []
    for m in matches:
        key = os.path.normpath(str(m))
        if key in seen:
            continue
        seen.add(key)
        try:
            st = m.stat()
        except OSError as exc:
            problems.append(InputError(f"cannot stat: {exc.strerror}", path=printable(str(m))))
            continue
        if (problem := refused(str(m), st.st_mode)) is not None:
            problems.append(problem)
            continue
        files.append(InputFile(str(m), st.st_size, st.st_mtime))
    return files, problems
