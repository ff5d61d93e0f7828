"""Bring a fleet store up to date with its inputs: hash every run, analyse only the runs whose
part is missing (new or changed), in worker processes or Ray tasks, then commit (store.py)."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from toranalyze import storage
from toranalyze.errors import InputError
from toranalyze.fleet import store
from toranalyze.fleet.batch import BATCH_RUNS, analyze_batch, batches
from toranalyze.fleet.pipeline import REPORT, RunOptions, RunOutcome, RunTask, options_salt
from toranalyze.fleet.runs import Run, content_hash, find_runs, run_files
from toranalyze.ingest.engine import map_ordered
from toranalyze.ingest.pipeline import Workers

# (stage, done, total, run id) after each run hashed or analysed
Progress = Callable[[str, int, int, str], None]


@dataclass
class BuildResult:
    runs: list[store.StoredRun]
    analyzed: list[str] = field(default_factory=list)  # run ids analysed this time
    reused: int = 0
    removed: list[str] = field(default_factory=list)  # run ids dropped from the store
    notes: dict[str, list[str]] = field(default_factory=dict)  # run id -> notes of its analysis
    rewritten: bool = False  # were the merged tables and manifest written
    warnings: list[str] = field(default_factory=list)  # inputs skipped or unreadable ("path: reason — next step")


@contextmanager
def _single_threaded_workers() -> Iterator[None]:
    """Workers each get one polars thread: the processes are the parallelism."""
    old = os.environ.get("POLARS_MAX_THREADS")
    os.environ["POLARS_MAX_THREADS"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["POLARS_MAX_THREADS"]
        else:
            os.environ["POLARS_MAX_THREADS"] = old


def _analyze(tasks: Sequence[RunTask], workers: Workers) -> Iterator[RunOutcome]:
    """Every task's outcome, the runs analysed in batches (fleet/batch.py): one batch per task of a
    worker process or Ray task, as many batches as workers at least, so that all of them work."""
    jobs = max(1, workers.jobs)
    per = -(-len(tasks) // jobs) if jobs > 1 else len(tasks)  # (ceiling division)
    work = batches(tasks, _sizes(tasks), max_runs=max(1, min(BATCH_RUNS, per)))
    if workers.engine != "local":
        # One Ray task per batch (engine.map_ordered); a local Ray instance started here inherits
        # the one-thread setting.
        with _single_threaded_workers():
            for outcomes in map_ordered(analyze_batch, work, workers.engine, jobs, workers.address):
                yield from outcomes
        return
    if jobs <= 1 or len(work) < 2:
        for batch in work:
            yield from analyze_batch(batch)
        return
    ctx = multiprocessing.get_context("spawn")  # polars' thread pool does not survive fork
    with _single_threaded_workers(), ProcessPoolExecutor(min(jobs, len(work)), mp_context=ctx) as pool:
        futures = [pool.submit(analyze_batch, b) for b in work]
        for fut in as_completed(futures):
            yield from fut.result()


def _sizes(tasks: Sequence[RunTask]) -> dict[str, int]:
    """Run id -> bytes of its files (0 for what cannot be asked)."""
    out: dict[str, int] = {}
    for t in tasks:
        total = 0
        for path in run_files(t.run):
            found = storage.stat(path)
            total += found.size if found is not None else 0
        out[t.run.id] = total
    return out


def build(paths: Sequence[str], out: Path, options: RunOptions | None = None, workers: Workers | None = None, *,
          progress: Progress | None = None, skip: Sequence[str] = ()) -> BuildResult:
    """Update the store at ``out`` from the runs under ``paths``, each analysed by
    ``pipeline.analyze_run`` with ``options``. Parts are written as each run finishes, so an
    interrupted build keeps its finished runs; the manifest is written last.

    Runs are analysed one per worker process (``workers.engine="local"``, ``workers.jobs`` of
    them) or as Ray tasks (``"ray"``, on the cluster at ``workers.address`` or a local one with
    ``jobs`` CPUs); the store is the same either way. ``skip``: more folders or prefixes never
    searched for runs (the store's URL when ``out`` is its local copy)."""
    options, workers = options or RunOptions(), workers or Workers()
    out.mkdir(parents=True, exist_ok=True)
    problems: list[InputError] = []
    runs = find_runs(paths, skip=[str(out), *skip], problems=problems)
    before = store.read_manifest(out)
    hashes = _hashes(runs, options_salt(options), progress, problems)
    todo = [RunTask(r, hashes[r.id], options) for r in runs if not store.has_part(out, hashes[r.id])]
    result = BuildResult(runs=[], reused=len(runs) - len(todo),
                         warnings=[f"{e.where()}: {e.message}" + (f" — {e.hint}" if e.hint else "") for e in problems])
    for i, outcome in enumerate(_analyze(todo, workers), 1):
        status = {"run": outcome.run.id, "error": outcome.error, "notes": list(outcome.notes),
                  "files_failed": outcome.files_failed}
        pages = {REPORT: outcome.report_html} if outcome.report_html is not None else None
        store.write_part(out, outcome.hash, outcome.tables, status, pages)
        result.analyzed.append(outcome.run.id)
        if progress:
            progress("analysing", i, len(todo), outcome.run.id)
    result.runs = [_stored(out, r, hashes[r.id], result) for r in runs]
    ids = {r.id for r in runs}
    result.removed = sorted(r.id for r in before.runs if r.id not in ids)
    result.analyzed.sort()
    _, result.rewritten = store.commit(out, result.runs, before)
    return result


def _hashes(runs: Sequence[Run], salt: str, progress: Progress | None,
            problems: list[InputError]) -> dict[str, str]:
    hashes: dict[str, str] = {}
    for i, run in enumerate(runs, 1):
        hashes[run.id] = content_hash(run, salt, problems)
        if progress:
            progress("hashing", i, len(runs), run.id)
    return hashes


def _stored(out: Path, run: Run, run_hash: str, result: BuildResult) -> store.StoredRun:
    status = store.read_status(out, run_hash)
    if status.get("notes"):
        result.notes[run.id] = list(status["notes"])
    return store.StoredRun(run.id, run.path, run_hash, status.get("error"))
