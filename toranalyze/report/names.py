"""Short job names for people: the same in the terminal, the report and the written tables.

The analysis keys a job as ``<directory>::<name>`` (the directory its logs came from and the
job's name or scheduler id). Shown to people, the key becomes the job's name alone when that is
unambiguous, else ``<directory relative to the input root>/<name>``; a job without a name (a
directory of logs, one file) takes the file's stem or the directory's name.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from toranalyze.reconstruct.analysis import Analysis


def input_root(inputs: Sequence[str]) -> str:
    dirs = [str(Path(p)) if Path(p).is_dir() else str(Path(p).parent) for p in inputs] or ["."]
    try:
        return os.path.commonpath(dirs)
    except ValueError:  # mixed absolute and relative paths
        return ""


def short_job_names(jobs: Sequence[str], inputs: Sequence[str]) -> dict[str, str]:
    root = input_root(inputs)
    single_file = len(inputs) == 1 and Path(inputs[0]).is_file()
    parts: dict[str, tuple[str, str]] = {}
    for key in jobs:
        folder, _, name = key.rpartition("::")
        rel = os.path.relpath(folder, root) if root and folder else folder
        rel = "" if rel == "." else rel
        if not name:
            name = Path(inputs[0]).stem if single_file else (Path(folder).name or "run")
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


def rename_jobs(an: Analysis, names: dict[str, str]) -> Analysis:
    """The analysis with every ``job`` column holding the short names."""
    def ren(df: pl.DataFrame | None) -> pl.DataFrame | None:
        if df is None or "job" not in df.columns:
            return df
        return df.with_columns(pl.col("job").replace(names))

    return Analysis(attempts=ren(an.attempts), incidents=ren(an.incidents),  # type: ignore[arg-type]
                    slow_periods=ren(an.slow_periods), tor=ren(an.tor), notes=an.notes,  # type: ignore[arg-type]
                    progress=ren(an.progress), checkpoints=ren(an.checkpoints))
