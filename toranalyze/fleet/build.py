"""Bring a fleet store up to date with its inputs: hash every run, analyse only the runs whose
content hash is not stored (new or changed), in worker processes or Ray tasks, recording them in
batches, then commit the set of runs (store.py)."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from toranalyze import storage
from toranalyze.errors import InputError
from toranalyze.fleet import store
from toranalyze.fleet.batch import BATCH_RUNS, analyze_batch, batches
from toranalyze.fleet.pipeline import REPORT, RunOptions, RunOutcome, RunTask, options_salt
from toranalyze.fleet.runs import Listed, Run, Shelf, list_runs, merged
from toranalyze.fleet.stamps import STAMP_FIELDS, hash_runs
from toranalyze.ingest.engine import WAIT_S, default_jobs, leave_interrupts_to_the_parent, map_ordered, stop_pool
from toranalyze.ingest.pipeline import Workers

# Analysed runs are stored in commits of this many runs or of this many seconds' work, whichever
# comes first: a crash loses at most that much analysis, and a commit's cost is spread over many runs.
RECORD_BATCH = 1000
RECORD_SECONDS = 60.0
# (stage, done, total, run id) after each run hashed or analysed
Progress = Callable[[str, int, int, str], None]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a build: the runs analysed before it are stored, the others are not."""

    def __init__(self, stored: int, left: int):
        super().__init__(f"{stored} runs stored, {left} left")
        self.stored, self.left = stored, left


@dataclass
class BuildResult:
    runs: list[store.StoredRun]
    analyzed: list[str] = field(default_factory=list)  # run ids analysed this time
    reused: int = 0
    removed: list[str] = field(default_factory=list)  # run ids dropped from the store
    notes: dict[str, list[str]] = field(default_factory=dict)  # run id -> notes of its analysis
    rewritten: bool = False  # were the tables and manifest written
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


def _analyze(tasks: Sequence[RunTask], workers: Workers, sizes: dict[str, int]) -> Iterator[RunOutcome]:
    """Every task's outcome, the runs analysed in batches (fleet/batch.py): one batch per task of a
    worker process or Ray task, as many batches as workers at least, so that all of them work."""
    jobs = max(1, workers.jobs)
    per = -(-len(tasks) // jobs) if jobs > 1 else len(tasks)  # (ceiling division)
    work = batches(tasks, sizes, max_runs=max(1, min(BATCH_RUNS, per)))
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
    with _single_threaded_workers(), ProcessPoolExecutor(min(jobs, len(work)), mp_context=ctx,
                                                         initializer=leave_interrupts_to_the_parent) as pool:
        try:
            pending = {pool.submit(analyze_batch, b) for b in work}
            while pending:
                # short waits: a wait without a timeout is not woken by Ctrl-C when the signal
                # lands on one of the executor's threads
                done, pending = wait(pending, timeout=WAIT_S, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield from fut.result()
        except BaseException:  # Ctrl-C, or a consumer that stops early: no batch is worth finishing
            stop_pool(pool)
            raise


@dataclass(frozen=True)
class Listing:
    """Which runs a build looks at. ``skip``: more folders or prefixes never searched for runs
    (the store's URL when the store is its local copy). ``add``: the runs found are added or
    brought up to date and the store's others are neither read nor dropped (a cost that does not
    grow with the store); without it the store is settled on exactly the runs found."""

    skip: Sequence[str] = ()
    add: bool = False


def build(paths: Sequence[str], out: Path, options: RunOptions | None = None, workers: Workers | None = None, *,
          progress: Progress | None = None, listing: Listing = Listing()) -> BuildResult:
    """Update the store at ``out`` from the runs under ``paths``, each given what
    ``pipeline.analyze_run`` gives it with ``options``. Analysed runs are committed to the store in
    groups (RECORD_BATCH, RECORD_SECONDS), so an interrupted build keeps its committed groups.

    Runs are analysed in batches (fleet/batch.py), a batch per worker process
    (``workers.engine="local"``, ``workers.jobs`` of them) or per Ray task (``"ray"``, on the
    cluster at ``workers.address`` or a local one with ``jobs`` CPUs); the store is the same
    either way. ``listing``: which runs are looked at (``Listing``)."""
    options, workers = options or RunOptions(), workers or Workers()
    skip, add = listing.skip, listing.add
    out.mkdir(parents=True, exist_ok=True)
    problems: list[InputError] = []
    st = store.Store(out)  # heals what a crash left behind
    jobs = min(workers.jobs, default_jobs())  # the listing runs here, whatever the engine
    listed, known, known_stamps = _listed_and_known(paths, st, [str(out), *skip], add, (jobs, problems))
    runs = listed.runs
    hashes, stamps = hash_runs(runs, listed.files, options_salt(options), known_stamps, problems,
                               reading=(lambda i, n: progress("reading files", i, n, "")) if progress else None)
    del known_stamps, listed  # (a store's worth of rows: not held through the analysis)
    stored = set(known["hash"])  # (a run's hash covers its id: equal hashes are the same run unchanged)
    todo = [RunTask(r, hashes[r.id], options) for r in runs if hashes[r.id] not in stored]
    before = set(known["run"])
    del known
    result = BuildResult(runs=[], reused=len(runs) - len(todo),
                         warnings=[f"{e.where()}: {e.message}" + (f" — {e.hint}" if e.hint else "") for e in problems])
    batch: list[store.RunRecord] = []
    since = time.monotonic()
    files_of = _slices(stamps, {t.run.id for t in todo})
    sizes = {rid: int(stamps["size"].slice(o, n).sum()) for rid, (o, n) in files_of.items()}
    try:
        for i, outcome in enumerate(_analyze(todo, workers, sizes), 1):
            o, n = files_of.get(outcome.run.id, (0, 0))
            batch.append(_record(outcome, stamps.slice(o, n)))
            if len(batch) >= RECORD_BATCH or time.monotonic() - since > RECORD_SECONDS:
                result.rewritten |= st.record(batch)
                batch, since = [], time.monotonic()
            result.analyzed.append(outcome.run.id)
            if progress:
                progress("analysing", i, len(todo), outcome.run.id)
    except KeyboardInterrupt:
        st.record(batch)  # what finished is kept: the next build does not analyse it again
        raise Interrupted(len(result.analyzed), len(todo) - len(result.analyzed)) from None
    result.rewritten |= st.record(batch)
    result.rewritten |= st.commit(_current(runs, hashes, stamps), drop_missing=not add)
    if not add:
        st.set_roots({str(Path(p).resolve()): Path(p).resolve().name for p in paths if not storage.is_url(p)})
    stored_runs = st.runs(st.rows_of([r.id for r in runs]) if add else None)
    result.runs = [_stored(stored_runs[r.id], result) for r in runs]
    ids = {r.id for r in runs}
    result.removed = sorted(rid for rid in before if rid not in ids)
    result.analyzed.sort()
    return result


def _listed_and_known(paths: Sequence[str], st: store.Store, skip: Sequence[str], add: bool,
                      how: tuple[int, list[InputError]]) -> tuple[Listed, pl.DataFrame, pl.DataFrame]:
    """The runs found (listed by ``jobs`` processes), and the store's rows and file stamps of
    them: all of it for a full build, read in a thread while the folders are listed (the
    listing waits on its workers); only the runs found for ``add``."""
    jobs, problems = how
    if add:
        listed = _named_as_stored(paths, st.roots(), skip, problems, jobs)
        rows = st.rows_of([r.id for r in listed.runs])
        return listed, rows, st.stamps(rows)
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(lambda: (st.run_frame(), st.stamps()))
        listed = list_runs(paths, skip=skip, problems=problems, jobs=jobs)
        return listed, *reading.result()


def _named_as_stored(paths: Sequence[str], roots: dict[str, str], skip: Sequence[str],
                     problems: list[InputError], jobs: int) -> Listed:
    """The runs under ``paths``, each named as a build of the store's roots would name it: a run
    added from under a folder the store was built from (``/data/runs/new``, built from
    ``/data/runs``) keeps the id that folder gives it (``runs/new``), so a later build of the
    whole folder finds it stored, not new."""
    listings: list[Shelf] = []
    kept: dict[str, tuple[str, int]] = {}  # run id -> (folder, the listing it is taken from)
    for spec in paths:
        found = list_runs([spec], skip=skip, problems=problems, jobs=jobs)
        real = None if storage.is_url(spec) else Path(spec).resolve()
        root = next((Path(r) for r in roots if real is not None and real.is_relative_to(r) and real != Path(r)), None)
        prefix = ""
        if root is not None and real is not None:
            between = real.parent.relative_to(root).as_posix()
            prefix = f"{roots[str(root)]}/" + ("" if between == "." else f"{between}/")
        ids = [prefix + r.id for r in found.runs]
        kept.update((rid, (r.path, len(listings))) for rid, r in zip(ids, found.runs, strict=True))
        listings.append((ids, [r.path for r in found.runs],
                         found.files.with_columns(pl.lit(prefix).add(pl.col("run")).alias("run"))))
    return merged(listings, kept)


def _slices(stamps: pl.DataFrame, ids: set[str]) -> dict[str, tuple[int, int]]:
    """Where each of these runs' stamps lie in ``stamps`` (grouped by run): (offset, length)."""
    counts = stamps.group_by("run", maintain_order=True).len()
    offsets = counts["len"].cum_sum() - counts["len"]
    return {rid: (o, n) for rid, o, n in zip(counts["run"], offsets, counts["len"], strict=True) if rid in ids}


def _current(runs: Sequence[Run], hashes: dict[str, str], stamps: pl.DataFrame) -> pl.DataFrame:
    """Every run found as the store's commit takes it: run, path, hash and its files' stamps."""
    found = pl.DataFrame({"run": [r.id for r in runs], "path": [r.path for r in runs],
                          "hash": [hashes[r.id] for r in runs]}, schema={"run": pl.String, "path": pl.String,
                                                                          "hash": pl.String})
    files = stamps.group_by("run").agg(pl.struct(STAMP_FIELDS.keys()).alias("files"))
    return (found.join(files, on="run", how="left", maintain_order="left")
            .with_columns(pl.col("files").fill_null(pl.lit([], dtype=pl.List(pl.Struct(STAMP_FIELDS))))))


def _record(outcome: RunOutcome, files: pl.DataFrame) -> store.RunRecord:
    status = {"error": outcome.error, "notes": list(outcome.notes), "files_failed": outcome.files_failed}
    pages = {REPORT: outcome.report_html} if outcome.report_html is not None else {}
    return store.RunRecord(outcome.run.id, outcome.run.path, outcome.hash, outcome.tables, status, pages, files)


def _stored(run: store.StoredRun, result: BuildResult) -> store.StoredRun:
    if run.notes:
        result.notes[run.id] = list(run.notes)
    return run
