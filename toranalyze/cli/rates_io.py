"""Writing rates.json next to an analysis (atomically: a temporary name, then a rename)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import polars as pl

from toranalyze.fleet.rates import build_rates, dumps
from toranalyze.fleet.single_run import run_frames


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_rates(tables: dict[str, pl.DataFrame], path: Path) -> bool:
    """rates.json of the four fleet tables at ``path``, rewritten only when its text changes (so a
    re-run on unchanged inputs writes nothing). Returns whether it was written."""
    text = dumps(build_rates(tables["jobs"], tables["attempts"], tables["incidents"], tables["exposure"]))
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_atomic(path, text)
    return True


def write_run_rates(events: pl.DataFrame, out_dir: Path) -> Path:
    """DIR/rates.json of the one run analyzed into DIR (from its attempts, incidents and tor tables)."""
    tables = {n: pl.read_parquet(out_dir / f"{n}.parquet") for n in ("attempts", "incidents", "tor")}
    f = run_frames(tables["attempts"], tables["incidents"], tables["tor"], events)
    target = out_dir / "rates.json"
    write_rates(f, target)
    return target
