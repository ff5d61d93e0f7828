"""One run through the same pipeline as ``analyze`` (ingest, then ``analyze_events``), as a
picklable task for a worker process, plus the salt that ties stored results to the options."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from toranalyze import __version__
from toranalyze.errors import ToranalyzeError
from toranalyze.fleet.runs import Run, run_files
from toranalyze.fleet.store import PARTS
from toranalyze.fleet.tables import RunTables, empty_tables, run_tables
from toranalyze.ingest.pipeline import IngestOptions, IngestResult, ingest
from toranalyze.reconstruct.analysis import Analysis, AnalysisOptions, analyze_events
from toranalyze.report.html import PLOTLY_JS

REPORT = "report.html"  # a run's job report, inside its part (runs/<part>/report.html)


@dataclass(frozen=True)
class RunTask:
    run: Run
    hash: str
    ingest: IngestOptions
    report: bool = True  # render the run's job report
    redact: bool = True  # secrets redacted in it


@dataclass
class RunOutcome:
    run: Run
    hash: str
    tables: RunTables
    error: str | None = None
    notes: tuple[str, ...] = ()
    files_failed: int = 0
    report_html: str | None = None  # the job report, stored in the run's part


def options_salt(options: IngestOptions, report: bool = True, redact: bool = True) -> str:
    """What besides the files decides a run's part: the version, the ingest options (with the
    contents of extra rules files) and the job report's options. A change re-analyses every run."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{__version__}\0{options.tz}\0{options.year}\0{options.parser}\0{report}\0{redact}\0".encode())
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
        page = None
        if task.report:
            page = _job_report(analysis, result, task)
            link = f"{PARTS}/{task.hash}/{REPORT}"  # relative to the store, as jobs.report says
            tables.jobs = tables.jobs.with_columns(pl.lit(link, pl.String).alias("report"))
        return RunOutcome(run, task.hash, tables, None, tuple(analysis.notes), failed, page)
    except ToranalyzeError as exc:
        where = exc.where()
        return RunOutcome(run, task.hash, empty_tables(), f"{where + ': ' if where else ''}{exc.message}")
    except Exception as exc:  # a bug on one run must not lose the others; it is reported
        return RunOutcome(run, task.hash, empty_tables(), f"internal error: {type(exc).__name__}: {exc}")


def _job_report(analysis: Analysis, result: IngestResult, task: RunTask) -> str:
    """The run's job report, with job names short relative to the run's folder; it loads the
    store's one plotly.js two folders up."""
    from toranalyze.report.job import JobReportInput, render_job_report
    from toranalyze.report.names import job_keys, rename_jobs, short_job_names

    named = rename_jobs(analysis, short_job_names(job_keys(analysis), [task.run.path]))
    return render_job_report(JobReportInput(named, result.events, result.summary()), title=task.run.id,
                             redact=task.redact, plotly_src=f"../../{PLOTLY_JS}")
