"""One run, from its logs to every output: the one pipeline behind ``analyze`` and each run of
``fleet`` (read alone, or its part of a batch of runs: fleet/batch.py).

``analyze_run`` ingests a run, analyses it and hands both to ``run_products``, which builds its
run tables and (optionally) renders its job report, with one frozen ``RunOptions`` the command
line builds once; a fleet batch calls ``run_products`` with each run's part. Secrets are redacted
here, at one point (``redact_outputs``), before anything is rendered or handed out to be
written: every table, JSON document, report input and warning the run gives. It writes nothing
and prints nothing: ``analyze`` writes the products to a folder, ``fleet`` into its store.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from toranalyze import __version__
from toranalyze.errors import FAULTS, NothingReadError, ToranalyzeError
from toranalyze.fleet.runs import Run, run_files
from toranalyze.fleet.store import PARTS
from toranalyze.fleet.tables import RunTables, empty_tables, run_tables
from toranalyze.ingest.pipeline import IngestOptions, IngestResult, Workers, ingest
from toranalyze.reconstruct.analysis import Analysis, AnalysisOptions, analyze_events
from toranalyze.reconstruct.job_names import job_keys, rename_jobs, short_job_names
from toranalyze.reconstruct.skew import clock_skew
from toranalyze.report.html import PLOTLY_JS
from toranalyze.report.redact import redact_frames, redact_json, redact_strings, redact_text

REPORT = "report.html"  # a run's job report in the store: reports/<content hash>/report.html


@dataclass(frozen=True)
class OutputOptions:
    report: bool = True  # render the run's job report
    redact: bool = True  # secrets (report/assets/secrets.toml) masked in every output


@dataclass(frozen=True)
class RunOptions:
    """Everything that decides a run's outputs (``Workers`` decides only where the work runs)."""

    ingest: IngestOptions = field(default_factory=IngestOptions)
    analysis: AnalysisOptions = field(default_factory=AnalysisOptions)
    output: OutputOptions = field(default_factory=OutputOptions)


# The report's table of unrecognised line shapes, given the run's line count (None: none shown).
LineShapes = Callable[[int], pl.DataFrame | None]


@dataclass(frozen=True)
class RunInput:
    """One run: its ``name`` (the tables' run id), the ``inputs`` as given (job names are short
    relative to them), the ``files`` read (default: the inputs), the folder ``root`` job keys and
    evidence paths are relative to in the run tables, and where its report sits."""

    name: str
    inputs: tuple[str, ...]
    root: str
    files: tuple[str, ...] | None = None
    title: str | None = None  # the report's title (default: its jobs')
    plotly_src: str = PLOTLY_JS  # plotly.js, relative to the report
    line_shapes: LineShapes | None = None
    # The caller keeps the run's events (analyze writes them); a fleet keeps only its rows, so its
    # runs without a job report hand back no events (and spend nothing redacting them).
    keeps_events: bool = True


@dataclass
class RunProducts:
    """What one run gives, redacted when the options say so."""

    events: pl.DataFrame  # empty when the run input keeps none (a fleet run without a job report)
    summary: dict[str, Any]  # IngestResult.summary(): summary.json
    warnings: list[str]  # one line per input or file problem ("path: message")
    analysis: Analysis  # job names short (reconstruct.job_names)
    tables: RunTables  # the run's rows of the fleet tables
    notes: list[str]  # the analysis' notes, naming jobs by their keys (the fleet's status.json)
    report_html: str | None = None

    def rates(self) -> dict[str, Any]:
        """The run's rates.json document (docs/rates.md): the fleet's fits over its own tables."""
        from toranalyze.fleet.rates import build_rates  # (scipy: 1 s to import, not needed to store a run)

        t = self.tables
        return build_rates(t.jobs, t.attempts, t.incidents, t.exposure)


NOTHING_READ = "no input could be read"


class NothingRead(NothingReadError):
    """No file of the run could be read; ``warnings`` and ``summary`` say why."""

    def __init__(self, warnings: list[str], summary: dict[str, Any]):
        super().__init__(NOTHING_READ, hint="check the paths; the warnings above say why each failed")
        self.warnings = warnings
        self.summary = summary


def ingest_notes(result: IngestResult, output: OutputOptions) -> tuple[dict[str, Any], list[str]]:
    """An ingest's summary (summary.json) and warnings (one line per input or file problem),
    redacted when ``output`` says so: warnings may quote log text."""
    summary, warnings = result.summary(), _warnings(result)
    return (redact_json(summary), redact_json(warnings)) if output.redact else (summary, warnings)


def analyze_run(run: RunInput, options: RunOptions, workers: Workers | None = None,
                on_file: Callable[[int, int, str], None] | None = None) -> RunProducts:
    """Ingest and analyse one run into its products. ``on_file(done, total, path)`` after each
    file read. Raises NothingRead when no file could be read."""
    workers = workers or Workers()  # one process, as in each of a fleet's workers
    result = ingest(run.files or run.inputs, options.ingest, workers, on_file=on_file)
    if result.files_read == 0:
        raise NothingRead(*reversed(ingest_notes(result, options.output)))
    analysis = analyze_events(result.events, options.analysis, engine=workers.engine, jobs=workers.jobs,
                              address=workers.address)
    return run_products(run, result, analysis, options)


def run_products(run: RunInput, result: IngestResult, analysis: Analysis, options: RunOptions) -> RunProducts:
    """A run's products from its ingest and its analysis (of its events alone, or its part of a
    fleet batch's): jobs named, rows built, secrets redacted, the job report rendered."""
    named = rename_jobs(analysis, short_job_names(job_keys(analysis), run.inputs))
    events = result.events if run.keeps_events or options.output.report else result.events.clear()
    products = RunProducts(events, result.summary(), _warnings(result), named,
                           run_tables(run.name, run.root, analysis), list(analysis.notes))
    if options.output.redact:
        products = redact_outputs(products)
    if options.output.report:
        products.report_html = _job_report(products, run, options.output)
    return products


def redact_outputs(products: RunProducts) -> RunProducts:
    """The one place secrets are taken out: every string column of every frame, the summary,
    the warnings and the analysis' notes."""
    return dataclasses.replace(
        products, events=redact_strings(products.events), summary=redact_json(products.summary),
        warnings=redact_json(products.warnings), analysis=redact_frames(products.analysis),
        tables=redact_frames(products.tables), notes=redact_json(products.notes),
    )


def _warnings(result: IngestResult) -> list[str]:
    lines = [f"{e.where()}: {e.message}" + (f" — {e.hint}" if e.hint else "") for e in result.input_errors]
    for f in result.files:
        lines += [f"{f.path}: {f.error}"] if f.error else []
        lines += [f"{f.path}: {w}" for w in f.warnings]
    return lines


def _job_report(products: RunProducts, run: RunInput, output: OutputOptions) -> str:
    from toranalyze.report.job import JobReportInput, render_job_report

    shapes = run.line_shapes(products.summary["lines"]) if run.line_shapes else None
    if shapes is not None and output.redact:
        shapes = redact_strings(shapes)
    page = JobReportInput(products.analysis, products.events, products.summary, shapes, clock_skew(products.events))
    # Its inputs are redacted already, when asked; ``redacted`` only labels the page.
    return render_job_report(page, title=run.title, redacted=output.redact, plotly_src=run.plotly_src)


# ---- the fleet's task: one run in a worker process or a Ray task ----


@dataclass(frozen=True)
class RunTask:
    run: Run
    hash: str
    options: RunOptions


@dataclass
class RunOutcome:
    run: Run
    hash: str
    tables: RunTables
    error: str | None = None
    notes: tuple[str, ...] = ()
    files_failed: int = 0
    report_html: str | None = None  # the job report, stored in the run's part


def options_salt(options: RunOptions) -> str:
    """What besides the files decides a run's part: the version, the ingest options (with the
    contents of extra rules files), the analysis options when not the defaults, and the output
    options. A change re-analyses every run."""
    ing, out = options.ingest, options.output
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{__version__}\0{ing.tz}\0{ing.year}\0{ing.parser}\0{out.report}\0{out.redact}\0".encode())
    for rules in ing.rules:
        h.update(Path(rules).read_bytes() + b"\0")
    if options.analysis != AnalysisOptions():  # default options keep the parts' names they always had
        h.update(repr(options.analysis).encode())
    return h.hexdigest()


def analyze_task(task: RunTask) -> RunOutcome:
    """``analyze_run`` for one run of a fleet (in a worker). Never raises for a bad run: the
    outcome carries the error and empty tables, so one run cannot stop a fleet."""
    run = task.run
    try:
        products = analyze_run(task_input(run), task.options)
    except NothingRead as exc:
        return RunOutcome(run, task.hash, empty_tables(), exc.message, files_failed=exc.summary["files_failed"])
    except ToranalyzeError as exc:
        return RunOutcome(run, task.hash, empty_tables(), _error(task, exc.where(), exc.message))
    except FAULTS as exc:  # a bug on one run must not lose the others; it is reported
        bug = f"internal error: {type(exc).__name__}: {exc}"
        return RunOutcome(run, task.hash, empty_tables(), _error(task, "", bug))
    return task_outcome(task, products)


def task_input(run: Run) -> RunInput:
    """A fleet run as ``analyze_run`` takes it: no events kept, plotly.js the store's, two folders up."""
    return RunInput(run.id, (run.path,), run.path, tuple(run_files(run)), title=run.id,
                    plotly_src=f"../../{PLOTLY_JS}", keeps_events=False)


def task_outcome(task: RunTask, products: RunProducts) -> RunOutcome:
    """A fleet run's outcome from its products, its job report linked from its jobs."""
    tables = products.tables
    if products.report_html is not None:
        link = f"{PARTS}/{task.hash}/{REPORT}"  # relative to the store, as jobs.report says
        tables.jobs = tables.jobs.with_columns(pl.lit(link, pl.String).alias("report"))
    return RunOutcome(task.run, task.hash, tables, None, tuple(products.notes),
                      products.summary["files_failed"], products.report_html)


def _error(task: RunTask, where: str, message: str) -> str:
    text = f"{where + ': ' if where else ''}{message}"
    return redact_text(text) if task.options.output.redact else text
