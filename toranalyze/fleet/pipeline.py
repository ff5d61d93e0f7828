"""One run through the same pipeline as ``analyze`` (ingest, then ``analyze_events``), as a
picklable task for a worker process, plus the salt that ties stored results to the options."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from toranalyze import __version__
from toranalyze.errors import ToranalyzeError
from toranalyze.fleet.runs import Run, run_files
from toranalyze.fleet.tables import RunTables, empty_tables, run_tables
from toranalyze.ingest.pipeline import IngestOptions, ingest
from toranalyze.reconstruct.analysis import AnalysisOptions, analyze_events


@dataclass(frozen=True)
class RunTask:
    run: Run
    hash: str
    ingest: IngestOptions


@dataclass
class RunOutcome:
    run: Run
    hash: str
    tables: RunTables
    error: str | None = None
    notes: tuple[str, ...] = ()
    files_failed: int = 0


def options_salt(options: IngestOptions) -> str:
    """What besides the files decides a run's tables: the version and the ingest options (with
    the contents of extra rules files). A change re-analyses every run."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{__version__}\0{options.tz}\0{options.year}\0{options.parser}\0".encode())
    for rules in options.rules:
        h.update(Path(rules).read_bytes() + b"\0")
    return h.hexdigest()


def analyze_run(task: RunTask) -> RunOutcome:
    """Ingest and analyse one run (in a worker process). Never raises for a bad run: the
    outcome carries the error and empty tables, so one run cannot stop a fleet."""
    run = task.run
    try:
        result = ingest(run_files(run), task.ingest, jobs=1)
        failed = len(result.files) - result.files_read
        if result.files_read == 0:
            return RunOutcome(run, task.hash, empty_tables(), "no input could be read", files_failed=failed)
        analysis = analyze_events(result.events, AnalysisOptions())
        tables = run_tables(run.id, run.path, analysis)
        return RunOutcome(run, task.hash, tables, None, tuple(analysis.notes), failed)
    except ToranalyzeError as exc:
        where = exc.where()
        return RunOutcome(run, task.hash, empty_tables(), f"{where + ': ' if where else ''}{exc.message}")
    except Exception as exc:  # a bug on one run must not lose the others; it is reported
        return RunOutcome(run, task.hash, empty_tables(), f"internal error: {type(exc).__name__}: {exc}")
