"""Short job names for people: the same in the terminal, the report and the written tables.

Naming is part of the reconstruction (the written tables carry the names), not of rendering.

The analysis keys a job as ``<directory>::<name>`` (the directory its logs came from and the
job's name or scheduler id). Shown to people, the key becomes the job's name alone when that is
unambiguous, else ``<directory relative to the input root>/<name>``; a job without a name (a
directory of logs, one file) takes the file's stem or the directory's name.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from toranalyze import storage
from toranalyze.reconstruct.analysis import Analysis


def _is_dir(spec: str) -> bool:
    if storage.is_url(spec):
        found = storage.stat(spec)
        return found is not None and found.is_dir
    return Path(spec).is_dir()


def input_root(inputs: Sequence[str]) -> str:
    """The inputs' common folder (of URLs: the common prefix, a URL; mixed with paths: '')."""
    if any(storage.is_url(p) for p in inputs):
        if not all(storage.is_url(p) for p in inputs):
            return ""
        urls = [storage.normalize(p) for p in inputs]
        dirs = [u if _is_dir(u) else storage.parent(u) for u in urls]
        if len({storage.root(d) for d in dirs}) != 1:  # other buckets or hosts
            return ""
        common = posixpath.commonpath(["/" + storage.key_of(d) for d in dirs]).strip("/")
        return storage.join(storage.root(dirs[0]), common) if common else storage.root(dirs[0])
    dirs = [str(Path(p)) if Path(p).is_dir() else str(Path(p).parent) for p in inputs] or ["."]
    try:
        return os.path.commonpath(dirs)
    except ValueError:  # mixed absolute and relative paths
        return ""


def short_job_names(jobs: Sequence[str], inputs: Sequence[str]) -> dict[str, str]:
    root = input_root(inputs)
    single_file = len(inputs) == 1 and not _is_dir(inputs[0]) and (storage.is_url(inputs[0])
                                                                   or Path(inputs[0]).is_file())
    parts: dict[str, tuple[str, str]] = {}
    for key in jobs:
        folder, _, name = key.rpartition("::")
        rel = os.path.relpath(folder, root) if root and folder else folder
        rel = "" if rel == "." else rel
        if not name:
            name = Path(storage.name(inputs[0])).stem if single_file else (storage.name(folder) or "run")
        parts[key] = (rel, name)
    counts: dict[str, int] = {}
    for _, name in parts.values():
        counts[name] = counts.get(name, 0) + 1
    out = {k: (n if counts[n] == 1 or not r else f"{r}/{n}") for k, (r, n) in parts.items()}
    # Still ambiguous (same folder and name cannot happen; different roots can): keep the key.
    seen: dict[str, int] = {}
    for v in out.values():
        seen[v] = seen.get(v, 0) + 1
    return {k: (v if seen[v] == 1 else k) for k, v in out.items()}


_QUOTED = re.compile(r"job '([^']*::[^']*)'")


def quoted_jobs(note: str) -> list[str]:
    """The job keys a note quotes (``job '<dir>::<name>'``)."""
    return _QUOTED.findall(note)


def job_keys(an: Analysis) -> list[str]:
    """Every job key the analysis mentions: its tables' and those quoted in its notes (jobs that
    were found but not analysed)."""
    quoted = [m for n in an.notes for m in quoted_jobs(n)]
    return sorted(set(an.tor["job"].to_list()) | set(an.attempts["job"].to_list()) | set(quoted))


def rename_jobs(an: Analysis, names: dict[str, str]) -> Analysis:
    """The analysis with every ``job`` column, and the job keys quoted in its notes, holding the
    short names (every other field kept as it is)."""
    def ren(df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.col("job").replace(names)) if "job" in df.columns else df

    def ren_opt(df: pl.DataFrame | None) -> pl.DataFrame | None:
        return None if df is None else ren(df)

    return dataclasses.replace(
        an, attempts=ren(an.attempts), incidents=ren(an.incidents), slow_periods=ren(an.slow_periods),
        tor=ren(an.tor), resources=ren(an.resources), progress=ren_opt(an.progress),
        checkpoints=ren_opt(an.checkpoints), notes=[rename_in_text(n, names) for n in an.notes])


def rename_in_text(text: str, names: dict[str, str]) -> str:
    """Job keys quoted in a note (``job '<dir>::<name>'``) replaced by their short names."""
    if not names:
        return text
    keys = sorted(names, key=len, reverse=True)  # longest first: a key may prefix another
    pattern = re.compile("|".join(re.escape(k) for k in keys))
    return pattern.sub(lambda m: names[m.group(0)], text)
