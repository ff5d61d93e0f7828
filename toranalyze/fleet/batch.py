"""Many runs of a fleet through one ingest and one analysis.

A run alone costs a fixed thousand-odd polars queries whatever its size; a batch of runs costs
about the same queries as one run. Records of different runs never meet: every record carries
its run as its ``scope`` (reconstruct/jobs.py), which the global steps of the analysis key by
(directories, nodes and pods named, clock references) and the ingest settles open years by; job
keys hold the run's directory, so every later stage, keyed by job, keeps runs apart too. The
tables are those each run would give alone (tests/fleet/test_batches.py).

A batch that fails as a whole (a bug met on one run's records) is analysed again one run at a
time, so that one run's error is that run's alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import polars as pl

from toranalyze.errors import FAULTS, ToranalyzeError
from toranalyze.fleet.pipeline import (
    NOTHING_READ,
    RunOptions,
    RunOutcome,
    RunTask,
    analyze_task,
    run_products,
    task_input,
    task_outcome,
)
from toranalyze.fleet.runs import Run, run_files
from toranalyze.fleet.tables import TABLES, RunTables, batch_tables, empty_tables
from toranalyze.ingest.pipeline import FileReport, IngestResult, ingest
from toranalyze.reconstruct.analysis import Analysis, analyze_events
from toranalyze.reconstruct.job_names import job_keys, quoted_jobs
from toranalyze.reconstruct.jobs import SCOPE
from toranalyze.report.redact import redact_frames, redact_json

# A batch's bounds: enough runs that the fixed cost of a query is shared, few enough bytes that
# its events fit a worker's memory many times over.
BATCH_RUNS = 500
BATCH_BYTES = 256 << 20


@dataclass(frozen=True)
class BatchTask:
    """Runs analysed together (all with the same options), each with its content hash."""

    tasks: tuple[RunTask, ...]

    @property
    def options(self) -> RunOptions:
        return self.tasks[0].options


def batches(tasks: Sequence[RunTask], sizes: dict[str, int], max_runs: int = BATCH_RUNS,
            max_bytes: int = BATCH_BYTES) -> list[BatchTask]:
    """``tasks`` cut into batches of consecutive runs, at most ``max_runs`` runs and (but for a
    run larger alone) ``max_bytes`` of files each (``sizes``: run id -> bytes). Runs found in one
    folder (files given by name) share a directory, which the analysis could not tell apart: each
    goes into another batch."""
    out: list[list[RunTask]] = []
    folders: list[set[str]] = []
    weight: list[int] = []
    for task in tasks:
        size = sizes.get(task.run.id, 0)
        # the first open batch that takes it (the last, unless its folder is taken there)
        fits = [i for i in range(max(0, len(out) - 2), len(out))
                if len(out[i]) < max_runs and weight[i] + size <= max_bytes and task.run.path not in folders[i]]
        if fits:
            i = fits[-1]
        else:
            out.append([])
            folders.append(set())
            weight.append(0)
            i = len(out) - 1
        out[i].append(task)
        folders[i].add(task.run.path)
        weight[i] += size
    return [BatchTask(tuple(b)) for b in out]


def analyze_batch(batch: BatchTask) -> list[RunOutcome]:
    """Every run's outcome, as ``analyze_task`` gives it for the run alone. Never raises."""
    if len(batch.tasks) == 1:
        return [analyze_task(batch.tasks[0])]
    try:
        return list(_together(batch))
    except FAULTS:  # (a ToranalyzeError too)
        return [analyze_task(t) for t in batch.tasks]


def _together(batch: BatchTask) -> Iterator[RunOutcome]:
    options = batch.options
    scope_of = {path: i for i, t in enumerate(batch.tasks) for path in run_files(t.run)}
    result = ingest(scope_of, options.ingest)
    reports: list[list[FileReport]] = [[] for _ in batch.tasks]
    for report in result.files:
        if report.path in scope_of:
            reports[scope_of[report.path]].append(report)
    read = [any(r.error is None for r in rs) for rs in reports]
    events = result.events.with_columns(
        pl.col("file").replace_strict(scope_of, default=None, return_dtype=pl.UInt32).alias(SCOPE))
    analysis = analyze_events(events, options.analysis)
    runs = _job_runs([t for t, ok in zip(batch.tasks, read, strict=True) if ok], job_keys(analysis))
    if options.output.report:
        yield from _with_reports(batch, _Batch(events, reports, read), analysis, runs)
        return
    tables = batch_tables(analysis, runs)
    notes = _notes_by_run(analysis.notes, runs)
    if options.output.redact:
        tables = redact_frames(tables)
        notes = {k: redact_json(v) for k, v in notes.items()}
    parts = {t: tables.get(t).partition_by("run", as_dict=True, maintain_order=True) for t in TABLES}
    for task, ok, rs in zip(batch.tasks, read, reports, strict=True):
        failed = sum(1 for r in rs if r.error is not None)
        if not ok:
            yield RunOutcome(task.run, task.hash, empty_tables(), NOTHING_READ, files_failed=failed)
            continue
        mine = RunTables(*(parts[t].get((task.run.id,), tables.get(t).clear()) for t in TABLES))
        yield RunOutcome(task.run, task.hash, mine, None, tuple(notes.get(task.run.id, [])), failed)


def _job_runs(read: Sequence[RunTask], keys: Sequence[str]) -> pl.DataFrame:
    """(job, run, _dir): the run of each job key, the run whose directory holds the key's
    directory (runs are disjoint folders: the walk up finds one)."""
    by_dir: dict[str, Run] = {t.run.path: t.run for t in read}
    rows: dict[str, list[str | None]] = {"job": [], "run": [], "_dir": []}
    for key in keys:
        folder = key.rpartition("::")[0]
        run = _owner(folder, by_dir)
        rows["job"].append(key)
        rows["run"].append(run.id if run else None)
        rows["_dir"].append(run.path if run else None)
    if any(r is None for r in rows["run"]):
        raise ToranalyzeError(f"a job of no run of the batch: {keys!r}")  # the batch is redone run by run
    return pl.DataFrame(rows, schema={"job": pl.String, "run": pl.String, "_dir": pl.String})


def _owner(folder: str, by_dir: dict[str, Run]) -> Run | None:
    while True:
        if folder in by_dir:
            return by_dir[folder]
        if "/" not in folder.rstrip("/"):
            return None
        folder = folder.rstrip("/").rpartition("/")[0]


def _notes_by_run(notes: Sequence[str], runs: pl.DataFrame) -> dict[str, list[str]]:
    """The analysis' notes by the run of the job each quotes (a note quoting none: every run's)."""
    run_of = dict(runs.select("job", "run").iter_rows())
    out: dict[str, list[str]] = {}
    for note in notes:
        owners = {run_of[k] for k in quoted_jobs(note) if k in run_of} or set(run_of.values())
        for run in sorted(owners):
            out.setdefault(run, []).append(note)
    return out


@dataclass(frozen=True)
class _Batch:
    """A batch's ingest: its events (with their scope) and each run's file reports and whether any
    of its files was read, in task order."""

    events: pl.DataFrame
    reports: list[list[FileReport]]
    read: list[bool]


def _with_reports(batch: BatchTask, ingested: _Batch, analysis: Analysis, runs: pl.DataFrame) -> Iterator[RunOutcome]:
    """Each run's outcome with its job report, from its part of the batch's events and analysis:
    what ``run_products`` makes of the run read alone."""
    events = ingested.events.partition_by(SCOPE, as_dict=True, include_key=False)
    parts = _analysis_by_run(analysis, runs)
    for i, (task, rs) in enumerate(zip(batch.tasks, ingested.reports, strict=True)):
        if not ingested.read[i]:
            yield RunOutcome(task.run, task.hash, empty_tables(), NOTHING_READ,
                             files_failed=sum(1 for r in rs if r.error is not None))
            continue
        mine = events.get((i,), ingested.events.clear().drop(SCOPE))
        products = run_products(task_input(task.run), IngestResult(mine, rs, []),
                                parts.get(task.run.id, _empty_like(analysis)), batch.options)
        yield task_outcome(task, products)


_FRAMES = ("attempts", "incidents", "slow_periods", "tor", "resources", "progress", "checkpoints")


def _analysis_by_run(analysis: Analysis, runs: pl.DataFrame) -> dict[str, Analysis]:
    """The analysis cut by run (``runs``: job, run), every table and note in its order."""
    frames = {}
    for name in _FRAMES:
        frame = getattr(analysis, name)
        if frame is not None:
            split = frame.join(runs.select("job", "run"), on="job", how="left", maintain_order="left")
            frames[name] = (frame.clear(), split.partition_by("run", as_dict=True, include_key=False))
    notes = _notes_by_run(analysis.notes, runs)
    out = {}
    for run in runs["run"].unique(maintain_order=True).to_list():
        cut = {name: by.get((run,), empty) for name, (empty, by) in frames.items()}
        out[run] = dataclasses.replace(analysis, **cut, notes=notes.get(run, []))
    return out


def _empty_like(analysis: Analysis) -> Analysis:
    cut = {name: getattr(analysis, name).clear() for name in _FRAMES if getattr(analysis, name) is not None}
    return dataclasses.replace(analysis, **cut, notes=[])
