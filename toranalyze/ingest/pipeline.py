"""Ingest: input paths -> one classified event table and a per-file report.

A bad file never stops the run: it gets a warning or an error in its report and
everything else is ingested. Only the caller (the CLI) decides what to print
and what exit code follows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import polars as pl

from toranalyze import storage
from toranalyze.errors import FAULTS, ToranalyzeError
from toranalyze.ingest import groups as file_groups
from toranalyze.ingest.affinity import on_thread
from toranalyze.ingest.batch import read_text_batch
from toranalyze.ingest.carry import revise_line_times, revise_times
from toranalyze.ingest.classify import (
    Chain,
    Rule,
    chains_by_pair,
    classify,
    event_pairs,
    first_rule,
    labelled,
    load_rules,
    pair_key,
)
from toranalyze.ingest.clock import (
    normalize_time,
    normalize_times,
    open_year_reference,
    open_years,
    resolve_open_years,
)
from toranalyze.ingest.derived import loss_spike_events
from toranalyze.ingest.discover import InputFile, discover
from toranalyze.ingest.engine import map_ordered
from toranalyze.ingest.parser_rows import parsing
from toranalyze.ingest.reader import FileResult, TextEvents, read_document_batch, read_document_events, read_text_events
from toranalyze.ingest.registry import Registry, default_registry
from toranalyze.ingest.rule_tools import fill_where
from toranalyze.ingest.streams import looks_binary, read_head
from toranalyze.ingest.vocabulary import Vocabulary, vocabulary_for
from toranalyze.schema import EVENT_SCHEMA, validate_events

NODE_DIRS = frozenset({"nodes", "hosts", "node", "host"})
ROW_GROUP = 256_000  # rows per Parquet row group of streamed event tables


@dataclass(frozen=True)
class IngestOptions:
    tz: str = "UTC"  # zone of timestamps that state none
    year: int | None = None  # year for yearless formats; default: inferred
    parser: str | None = None  # force one parser for every file
    rules: tuple[str, ...] = ()  # user rules files, tried before the built-ins


@dataclass(frozen=True)
class Workers:
    """Where the work runs: ``jobs`` worker processes (``engine="local"``) or Ray slots
    (``engine="ray"``, on the cluster at ``address`` or a local one). It never changes a result."""

    jobs: int = 1
    engine: str = "local"
    address: str | None = None


@dataclass
class FileReport:
    path: str
    parser: str = ""
    lines: int = 0
    events: int = 0
    covered: int = 0
    warnings: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def coverage(self) -> float | None:
        return None if self.lines == 0 else self.covered / self.lines

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["coverage"] = None if self.coverage is None else round(self.coverage, 4)
        return d


class IngestResult:
    """The event table (in memory; or in a Parquet file, read on first use; or the lazy ``plan``
    over a spool's parts, for the caller to stream to its file), the per-file reports and the
    inputs that could not be found."""

    def __init__(self, events: pl.DataFrame | pl.LazyFrame | Path, files: list[FileReport],
                 input_errors: list[ToranalyzeError]):
        self.files = files
        self.input_errors = input_errors
        self.events_path = events if isinstance(events, Path) else None
        self._events = events if isinstance(events, pl.DataFrame) else None
        self._plan = events if isinstance(events, pl.LazyFrame) else None

    @property
    def plan(self) -> pl.LazyFrame:
        """The event table as a query: streamed from its parts or its file, never held whole."""
        if self._plan is not None:
            return self._plan
        if self._events is not None:
            return self._events.lazy()
        assert self.events_path is not None
        return pl.scan_parquet(self.events_path)

    @property
    def events(self) -> pl.DataFrame:
        if self._events is None:
            self._events = self.plan.collect()
        return self._events

    @property
    def n_events(self) -> int:
        if self._events is None:
            return int(self.plan.select(pl.len()).collect().item())
        return self.events.height

    @property
    def files_read(self) -> int:
        return sum(1 for f in self.files if f.error is None)

    def summary(self) -> dict[str, Any]:
        lines = sum(f.lines for f in self.files)
        covered = sum(f.covered for f in self.files)
        return {
            "files": len(self.files),
            "files_read": self.files_read,
            "files_failed": len(self.files) - self.files_read,
            "events": self.n_events,
            "lines": lines,
            "coverage": round(covered / lines, 4) if lines else None,
            "input_errors": [f"{e.where()}: {e.message}" for e in self.input_errors],
            "per_file": [f.as_dict() for f in self.files],
        }


def node_from_path(path: str) -> str | None:
    """'run/nodes/gpu-007/kern.log' -> 'gpu-007' (a folder under nodes/ or hosts/ names the node;
    of a URL, the folders of its key)."""
    parts = PurePath(storage.key_of(path)).parts
    for parent, child in zip(parts, parts[1:-1], strict=False):
        if parent.lower() in NODE_DIRS:
            return child
    return None


def finalize_file(parsed: pl.DataFrame, file: InputFile, options: IngestOptions) -> pl.DataFrame:
    """RAW rows of one file -> EVENT_SCHEMA rows (unclassified): UTC time, file, node and job fills."""
    return _finish(normalize_time(parsed.lazy(), tz=options.tz, year=options.year), file, _job_ids(parsed))


def _job_ids(parsed: pl.DataFrame) -> list[str]:
    return parsed["job_id"].drop_nulls().unique().to_list()


def _file_facts(file: InputFile, job_ids: Sequence[str]) -> tuple[str, str | None, str | None, int]:
    """What a file's rows are filled with: its path, the node the path names, the job when the
    file names exactly one (a Slurm .out, a pod log; ``job_ids``: every job the whole file names),
    and its modification year (for open years)."""
    job = job_ids[0] if len(job_ids) == 1 else None
    return file.path, node_from_path(file.path), job, dt.datetime.fromtimestamp(file.mtime, dt.UTC).year


def _finish(lf: pl.LazyFrame, file: InputFile, job_ids: Sequence[str]) -> pl.DataFrame:
    """Rows with settled times -> EVENT_SCHEMA (+ ``_year_open``, ``_mtime_year``): file, node and
    job fills (``_file_facts``)."""
    path, path_node, job, mtime_year = _file_facts(file, job_ids)
    fills = [pl.lit(path).alias("file")]
    if path_node is not None:
        fills.append(pl.col("node").fill_null(path_node))
    if job is not None:
        fills.append(pl.col("job_id").fill_null(job))
    lf = lf.with_columns(fills).with_columns(_NO_CLASS)
    return lf.select(*_EVENT_CASTS, "_year_open", pl.lit(mtime_year).alias("_mtime_year")).collect()


def finalize_files(parts: Sequence[tuple[pl.DataFrame, InputFile]], options: IngestOptions) -> list[pl.DataFrame]:
    """``finalize_file`` of several files in one query (a query's fixed cost, not the rows, is most
    of what a small file costs): the same rows, one frame per file, in order."""
    if len(parts) < 2:
        return [finalize_file(parsed, file, options) for parsed, file in parts]
    frames = [parsed for parsed, _ in parts]
    fid = np.repeat(np.arange(len(parts), dtype=np.uint32), [f.height for f in frames])
    rows = pl.concat(frames, how="vertical").with_columns(pl.Series("_fid", fid))
    facts = [_file_facts(file, _job_ids(parsed)) for parsed, file in parts]
    meta = pl.DataFrame(facts, schema={"_file": pl.String, "_node": pl.String, "_job": pl.String,
                                       "_mtime_year": pl.Int32}, orient="row").with_row_index("_fid")
    lf = normalize_times(rows.lazy(), "_fid", tz=options.tz, year=options.year).join(
        meta.lazy(), on="_fid", how="left", maintain_order="left")
    lf = lf.with_columns(pl.col("_file").alias("file"), pl.coalesce("node", "_node").alias("node"),
                         pl.coalesce("job_id", "_job").alias("job_id")).with_columns(_NO_CLASS)
    done = lf.select(*_EVENT_CASTS, "_year_open", "_mtime_year", "_fid").collect()
    by_file = done.partition_by("_fid", as_dict=True, include_key=False, maintain_order=True)
    empty = done.clear().drop("_fid")
    return [by_file.get((i,), empty) for i in range(len(parts))]


# Built once: every file's rows are finished with them.
_NO_CLASS = (pl.lit(None, pl.String).alias("failure_class"), pl.lit(None, pl.String).alias("rule"))
_EVENT_CASTS = tuple(pl.col(c).cast(t, strict=False) for c, t in EVENT_SCHEMA.items())


def read_file(
    file: InputFile, registry: Registry, options: IngestOptions, rules: list[Rule] | None = None
) -> tuple[pl.DataFrame | None, FileReport]:
    """One file's events (open years still open: ``_year_open``, ``_mtime_year``) and its report.

    With ``rules`` the events are classified here, by the worker that read the file: a rule
    reads only its own row, so classifying file by file gives the table classifying it whole
    would, spread over the workers and never holding more than one file's events.
    """
    with parsing():
        events, report = _read_file(file, registry, options)
        if events is not None and rules is not None:
            events = _classified(events, rules)
        return events, report


RULES_PER_THREAD = 24  # below the 32 compiled regexes polars keeps per thread (affinity.py)
SPLIT_ROWS = 20_000  # fewer events: trying every rule on every row costs less than a query per chain


def _classified(events: pl.DataFrame, rules: list[Rule]) -> pl.DataFrame:
    """``events`` with failure_class, rule and severity set by ``rules`` (same columns), as
    ``classify`` sets them. The rules are tried in groups, a group's rules (by position in
    ``rules``) always on the same thread so their patterns stay compiled from one file to the
    next; within a group the rows of each (source, kind) pair meet only the rules that pair can
    meet (``chains_by_pair``). The first group with a match holds the first matching rule."""
    pairs = event_pairs(events)
    groups: dict[int, list[tuple[int, Rule]]] = {}
    for pos, rule in enumerate(rules):
        groups.setdefault(pos // RULES_PER_THREAD, []).append((pos, rule))
    plans = {g: plan for g, group in groups.items() if (plan := chains_by_pair(group, pairs))}
    if not plans:
        return classify(events, []).select(events.columns).collect()
    # A small table tries all of a group's chains as one on every row (a query per chain would
    # cost more); its rules' own conditions keep each row to its pair's rules.
    key = events.select(pair_key()).to_series() if events.height >= SPLIT_ROWS else None
    found = [
        on_thread(f"classify-{g}", partial(_first_rules, events, key, plan, f"_rule{g}"))
        for g, plan in sorted(plans.items())
    ]
    with_index = events.lazy().with_columns(found)
    return labelled(with_index, rules, pl.coalesce(s.name for s in found)).select(events.columns).collect()


def _first_rules(events: pl.DataFrame, key: pl.Series | None, plan: dict[Chain, list[str]], name: str) -> pl.Series:
    """The first rule of its pair's chain each row meets (null: none, or no chain for its pair);
    without ``key`` the chains are tried as one on every row."""
    if key is None or len(plan) == 1:
        chain = tuple(sorted({r for c in plan for r in c}, key=lambda r: r[0]))
        return events.select(first_rule(chain).alias(name)).to_series()
    out = pl.Series(name, [], pl.Int32).extend_constant(None, events.height)
    for chain, keys in plan.items():
        out = fill_where(out, events, key.is_in(keys), first_rule(chain))
    return out


def _open(file: InputFile, registry: Registry, options: IngestOptions, report: FileReport) -> tuple[bool, list[Any]]:
    """(whether one parser reads the file whole, the parsers); no parsers: nothing to read."""
    head = read_head(file.path)
    if not head:
        report.warnings.append("empty file")
        return False, []
    if looks_binary(head) and options.parser is None:
        claimant = registry.binary_claimant(head)  # a binary format a parser reads (a PyTorch dump)
        if claimant is not None:
            report.parser = claimant.name
            return True, [claimant]
        report.error = "binary data, not a text log: skipped"
        return False, []
    text = head.decode("utf-8", errors="replace")
    mode, parsers = registry.choose(file.path, text, options.parser)
    document = mode == "document" or (mode == "forced" and parsers[0].sniff(text))
    if document:
        report.parser = parsers[0].name
    return document, parsers


def _note_text(report: FileReport, lines: int, covered: int, used: list[str], warnings: list[str]) -> None:
    report.parser = "text:" + ",".join(used) if used else "text:(nothing recognised)"
    report.lines, report.covered = lines, covered
    report.warnings.extend(warnings)


def _failed(report: FileReport, exc: BaseException) -> None:
    if isinstance(exc, ToranalyzeError):
        report.error = exc.message + (f" — {exc.hint}" if exc.hint else "")
    else:  # a parser bug must not stop the other files
        report.error = f"internal error while reading: {type(exc).__name__}: {exc}"


def _read_file(file: InputFile, registry: Registry, options: IngestOptions) -> tuple[pl.DataFrame | None, FileReport]:
    report = FileReport(file.path)
    try:
        document, parsers = _open(file, registry, options, report)
        if parsers and not document:
            result = read_text_events(file.path, parsers, vocab=_vocabulary(options))
            return _text(result, file, options, report), report
    except FAULTS as exc:
        _failed(report, exc)
        return None, report
    return _read_opened(file, parsers, options, report)


def _vocabulary(options: IngestOptions) -> Vocabulary | None:
    """The failure vocabulary searched on lines no parser claims: the built-in and user rules marked
    ``anywhere``; none when one parser is forced on every file (its rows alone are wanted)."""
    return None if options.parser else vocabulary_for(options.rules)


def _text(result: FileResult, file: InputFile, options: IngestOptions, report: FileReport) -> pl.DataFrame:
    _note_text(report, result.lines, result.covered, result.parsers, result.warnings)
    events = finalize_file(result.events, file, options)
    report.events = events.height
    return events


_Read = tuple[pl.DataFrame | None, FileReport]  # a file's events (None: nothing read) and report


def _read_group(files: Sequence[InputFile], registry: Registry, options: IngestOptions) -> list[_Read]:
    """``_read_file`` of each file, the text files chosen the same parsers read as one batch
    (``read_text_batch``) and every file's rows finished in one query (``finalize_files``). If a
    batch fails, its files are read one by one: only a file at fault loses its events."""
    out: list[_Read] = []
    batches: dict[tuple[int, ...], tuple[list[Any], list[int]]] = {}
    parsed: list[tuple[int, pl.DataFrame]] = []  # (file, its rows before finalize_file)
    documents: list[tuple[int, Any]] = []  # (file, the parser that reads it whole)
    for file in files:
        report = FileReport(file.path)
        try:
            document, parsers = _open(file, registry, options, report)
        except FAULTS as exc:
            _failed(report, exc)
            document, parsers = False, []
        if parsers and not document:
            batches.setdefault(tuple(map(id, parsers)), (parsers, []))[1].append(len(out))
        elif parsers:
            documents.append((len(out), parsers[0]))
        out.append((None, report))  # filled below
    parsed.extend(_documents(files, documents, out))
    for parsers, at in batches.values():
        try:
            results = read_text_batch([files[i].path for i in at], parsers, vocab=_vocabulary(options))
        except FAULTS:
            for i in at:
                out[i] = _read_file(files[i], registry, options)
            continue
        for i, result in zip(at, results, strict=True):
            _note_text(out[i][1], result.lines, result.covered, result.parsers, result.warnings)
            parsed.append((i, result.events))
    _finish_all(sorted(parsed, key=lambda p: p[0]), files, out, options)
    return out


def _documents(files: Sequence[InputFile], documents: list[tuple[int, Any]],
               out: list[_Read]) -> list[tuple[int, pl.DataFrame]]:
    """The rows of the files read whole (``read_document_batch``), each file's report noted."""
    rows = []
    for (i, _), result in zip(documents, read_document_batch([(files[i].path, p) for i, p in documents]), strict=True):
        if isinstance(result, BaseException):
            _failed(out[i][1], result)
        else:
            _note_document(out[i][1], result)
            rows.append((i, result.events))
    return rows


def _finish_all(parsed: list[tuple[int, pl.DataFrame]], files: Sequence[InputFile], out: list[_Read],
                options: IngestOptions) -> None:
    """Each file's rows finished into its events in ``out``, all in one query; if that fails,
    file by file (a file whose rows fail reports why and gives none)."""
    try:
        done: list[pl.DataFrame] | None = finalize_files([(rows, files[i]) for i, rows in parsed], options)
    except FAULTS:
        done = None
    for k, (i, rows) in enumerate(parsed):
        report = out[i][1]
        try:
            events = done[k] if done is not None else finalize_file(rows, files[i], options)
        except FAULTS as exc:
            _failed(report, exc)
            continue
        report.events = events.height
        out[i] = (events, report)


def _read_opened(file: InputFile, parsers: list[Any], options: IngestOptions, report: FileReport) -> _Read:
    """A file ``_open`` found nothing to read in, or one a document parser reads whole."""
    if not parsers:
        return None, report
    try:
        return _document(file, parsers[0], options, report), report
    except FAULTS as exc:
        _failed(report, exc)
        return None, report


def _document(file: InputFile, parser: Any, options: IngestOptions, report: FileReport) -> pl.DataFrame:
    """The events of a file one parser reads whole (documents are small: read in one go)."""
    result = read_document_events(file.path, parser)
    _note_document(report, result)
    events = finalize_file(result.events, file, options)
    report.events = events.height
    return events


def _note_document(report: FileReport, result: FileResult) -> None:
    report.lines, report.covered = result.lines, result.covered
    report.warnings.extend(result.warnings)


_TIME_COLUMNS = ("line", "ts", "ts_offset_s", "ts_year_known", "ts_inferred")


def _spool_text(file: InputFile, parsers: list[Any], options: IngestOptions, rules: list[Rule], part: str,
                report: FileReport) -> list[str]:
    """A text file's classified events as Parquet parts ``part.NNNNN`` without ever holding them all.

    Pass one writes each block's parsed rows to disk and keeps only their time columns; the
    file-wide time rules (``normalize_time``: years and clocks filled across the whole file) run
    on those; pass two finishes each block with its slice of the settled times. The parts hold
    the rows ``read_file`` would return, in the same order."""
    blocks = TextEvents(file.path, parsers)
    # Each block's parsed rows: spilled to a part on disk, except the last, kept in memory (a
    # small file, one block, then never touches the disk before its final part).
    raw: list[tuple[str | pl.DataFrame, int]] = []
    times: list[pl.DataFrame] = []
    job_ids: set[str] = set()
    try:
        for events in blocks:
            if events.height:
                _spill_last(raw, times, part)
                raw.append((events, events.height))
                job_ids.update(events["job_id"].drop_nulls().unique().to_list())
        _note_text(report, blocks.lines, blocks.covered, sorted(blocks.used), blocks.warnings)
        if not raw:
            return []
        # rows yielded before a later block timed them (TextEvents.late_revisions)
        late = blocks.late_revisions()

        def revised(frame: pl.DataFrame) -> pl.DataFrame:
            return frame if late is None else revise_times(frame, late)

        if len(raw) == 1:  # one block, in memory: its times are settled in the query that finishes it
            held = raw[0][0]
            assert isinstance(held, pl.DataFrame)
            settled_block = normalize_time(revised(held).lazy(), tz=options.tz, year=options.year)
            return [_write_part(_finish(settled_block, file, sorted(job_ids)), rules, f"{part}.00000", report)]
        times.append(_times(raw[-1][0]))
        if late is not None:
            times = [revise_line_times(t, late) for t in times]
        settled = normalize_time(pl.concat(times).lazy(), tz=options.tz, year=options.year).collect()
        settled = settled.select("ts", "ts_inferred", "_year_open")
        del times
        parts: list[str] = []
        offset = 0
        for k, (held, n) in enumerate(raw):
            events = revised(pl.read_parquet(held) if isinstance(held, str) else held)
            events = events.with_columns(settled.slice(offset, n))
            offset += n
            block = _finish(events.lazy(), file, sorted(job_ids))
            parts.append(_write_part(block, rules, f"{part}.{k:05d}", report))
        return parts
    finally:
        for held, _ in raw:
            if isinstance(held, str):
                Path(held).unlink(missing_ok=True)


def _times(held: str | pl.DataFrame) -> pl.DataFrame:
    assert isinstance(held, pl.DataFrame)
    return held.select(_TIME_COLUMNS)


def _write_part(block: pl.DataFrame, rules: list[Rule], path: str, report: FileReport) -> str:
    """A finished block classified and written to ``path``; its rows counted in ``report``."""
    _classified(block, rules).write_parquet(path, row_group_size=ROW_GROUP)
    report.events += block.height
    return path


def _spill_last(raw: list[tuple[str | pl.DataFrame, int]], times: list[pl.DataFrame], part: str) -> None:
    """Write the last held block of ``raw`` to disk (``part.rawNNNNN``) and keep only its path
    (and its time columns, in ``times``)."""
    if raw and isinstance(raw[-1][0], pl.DataFrame):
        times.append(_times(raw[-1][0]))
        path = f"{part}.raw{len(raw) - 1:05d}"
        raw[-1][0].write_parquet(path)
        raw[-1] = (path, raw[-1][1])


def spool_file(
    file: InputFile, registry: Registry, options: IngestOptions, rules: list[Rule], part: str
) -> tuple[list[str], FileReport]:
    """read_file for a streamed table: the file's classified events written to Parquet parts named
    after ``part`` (none when it has no events); a text file's events are never all in memory."""
    report = FileReport(file.path)
    try:
        with parsing():
            document, parsers = _open(file, registry, options, report)
            if not parsers:
                return [], report
            if not document:
                return _spool_text(file, parsers, options, rules, part, report), report
            events = _document(file, parsers[0], options, report)
            if events.height == 0:
                return [], report
            _classified(events, rules).write_parquet(part, row_group_size=ROW_GROUP)
        return [part], report
    except FAULTS as exc:
        for leftover in Path(part).parent.glob(Path(part).name + "*"):
            leftover.unlink()
        report.events = 0
        _failed(report, exc)
        return [], report


@dataclass(frozen=True)
class _FileTask:
    """Files to read (one, or a group of small ones: ``groups``); with ``part``, their events are
    written there instead of returned."""

    files: tuple[InputFile, ...]
    options: IngestOptions
    rules: list[Rule]
    part: str | None = None


_Given = pl.DataFrame | list[str] | None


def _run(task: _FileTask, registry: Registry) -> tuple[_Given, list[FileReport]]:
    if len(task.files) > 1:
        return _run_group(task, registry)
    file = task.files[0]
    if task.part is not None:
        parts, report = spool_file(file, registry, task.options, task.rules, task.part)
        return parts or None, [report]
    events, report = read_file(file, registry, task.options, task.rules)
    if events is None or events.height == 0:
        return None, [report]
    return events, [report]


def _run_group(task: _FileTask, registry: Registry) -> tuple[_Given, list[FileReport]]:
    """Small files, each read alone, their events classified together and returned or written as
    one part (see ``groups``)."""
    read: list[tuple[pl.DataFrame, FileReport]] = []
    reports: list[FileReport] = []
    with parsing():
        for events, report in _read_group(task.files, registry, task.options):
            reports.append(report)
            if events is not None and events.height:
                read.append((events, report))
        if not read:
            return None, reports
        try:
            events = _classified(pl.concat([e for e, _ in read], how="vertical"), task.rules)
        except FAULTS:  # find the file whose rows fail; the others keep their events
            events = _classified_each(read, task.rules)
    if task.part is None or events.height == 0:
        return (events if events.height else None), reports
    try:
        events.write_parquet(task.part, row_group_size=ROW_GROUP)
    except FAULTS as exc:
        Path(task.part).unlink(missing_ok=True)
        for _, report in read:
            report.events = 0
            _failed(report, exc)
        return None, reports
    return [task.part], reports


def _classified_each(read: list[tuple[pl.DataFrame, FileReport]], rules: list[Rule]) -> pl.DataFrame:
    """The files' events classified one file at a time; a file that fails reports why and gives none."""
    kept = []
    for events, report in read:
        try:
            kept.append(_classified(events, rules))
        except FAULTS as exc:
            report.events = 0
            _failed(report, exc)
    return pl.concat(kept, how="vertical") if kept else read[0][0].clear()


def _run_with_installed_parsers(task: _FileTask) -> tuple[_Given, list[FileReport]]:
    """Worker entry point (module level, so a spawned process can import it)."""
    return _run(task, default_registry())


def _tasks(files: Sequence[InputFile], options: IngestOptions, rules: list[Rule], spool: str | None,
           workers: Workers) -> list[_FileTask]:
    """One task per group of small files or other file; with ``spool``, each writes its parts there."""
    alone = workers.jobs <= 1 and workers.engine == "local"
    most = file_groups.ALONE_GROUP_FILES if alone else file_groups.GROUP_FILES
    return [
        _FileTask(g, options, rules, None if spool is None else str(Path(spool) / f"part-{i:07d}.parquet"))
        for i, g in enumerate(file_groups.grouped(files, most))
    ]


def _run_all(
    tasks: list[_FileTask],
    registry: Registry | None,
    on_file: Callable[[int, int, str], None] | None,
    workers: Workers,
) -> tuple[list[Any], list[FileReport]]:
    """Every task in input order: what each gave (frames or part paths) and every file's report."""
    if registry is None and (workers.jobs > 1 or workers.engine != "local"):
        results = map_ordered(_run_with_installed_parsers, tasks, workers.engine, workers.jobs, workers.address)
    else:
        reg = registry or default_registry()
        results = (_run(t, reg) for t in tasks)
    n_files = sum(len(t.files) for t in tasks)
    given: list[Any] = []
    reports: list[FileReport] = []
    for out, task_reports in results:
        for report in task_reports:
            reports.append(report)
            if on_file:
                on_file(len(reports), n_files, report.path)
        if out is not None:
            given.append(out)
    return given, reports


def ingest(
    paths: Sequence[str] | Mapping[str, int],
    options: IngestOptions = IngestOptions(),
    workers: Workers = Workers(),
    *,
    on_file: Callable[[int, int, str], None] | None = None,
    spool: Path | None = None,
    registry: Registry | None = None,
) -> IngestResult:
    """Discover, parse, normalize and classify every input. Never raises for a bad file.

    With ``workers`` (more than one job, or the Ray engine) files are read in worker processes or
    Ray tasks, with the installed parsers only (see ``engine``); ``registry``: other parsers, read
    in this process. With ``spool`` (a folder the caller keeps until it has written the table) the
    events are never held in memory: each block of a file is written there as a Parquet part as
    soon as it is read and its times are settled (see ``spool_file``), and the result's ``plan``
    gives the table from the parts in one streaming pass, for the caller to write. ``paths`` as a
    mapping (file, as its events will name it -> scope; not with ``spool``): inputs read together
    that are otherwise apart (the runs of a fleet batch), whose open years are settled each on its
    own.
    """
    scopes = paths if isinstance(paths, Mapping) else None
    rules = load_rules(options.rules)
    files, input_errors = discover(list(paths))
    if spool is not None:
        given, reports = _run_all(_tasks(files, options, rules, str(spool), workers), registry, on_file, workers)
        return IngestResult(events_plan([part for parts in given for part in parts]), reports, list(input_errors))
    frames, reports = _run_all(_tasks(files, options, rules, None, workers), registry, on_file, workers)
    if frames:
        events = resolve_open_years(pl.concat(frames, how="vertical"), pl.col("_mtime_year"), scopes).drop(
            "_mtime_year")
    else:
        events = pl.DataFrame(schema=EVENT_SCHEMA)
    events = events.select(list(EVENT_SCHEMA))
    events = pl.concat([events, loss_spike_events(events)], how="vertical")
    validate_events(events)
    return IngestResult(events, reports, list(input_errors))


def events_plan(parts: list[str]) -> pl.LazyFrame:
    """The event table over (classified) spooled parts: open years settled and derived events
    added, as a query that streams them."""
    if not parts:
        return pl.LazyFrame(schema=EVENT_SCHEMA)
    lf = pl.scan_parquet(parts)
    resolved = lf.with_columns(open_years(open_year_reference(lf), pl.col("_mtime_year")))
    events = resolved.select(list(EVENT_SCHEMA))
    validate_events(events)
    spikes = loss_spike_events(events)
    return pl.concat([events, spikes.lazy()], how="vertical")
