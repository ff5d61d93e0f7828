"""The event table: one typed row per recognised log record.

Two schemas live here:

* ``RAW_SCHEMA`` is what a parser plugin returns. Timestamps are *as written*
  (naive wall clock, possibly without a year or a zone); the pipeline turns them
  into UTC afterwards so every parser shares one time rule.
* ``EVENT_SCHEMA`` is the normalized table written to ``events.parquet``.

Every column is documented in ``COLUMN_DOCS``; ``docs/schemas.md`` is generated
from the same dictionary by ``toranalyze schema``.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl
from polars.datatypes import DataType, DataTypeClass

from toranalyze.errors import SchemaError

UTC_US = pl.Datetime("us", "UTC")
NAIVE_US = pl.Datetime("us")


def frame_schema(columns: Mapping[str, DataType | DataTypeClass]) -> pl.Schema:
    """A table contract from a column → dtype mapping.

    Typed so that a mapping mixing dtype classes (``pl.String``) and instances
    (``pl.Datetime("us", "UTC")``) type-checks, which ``pl.Schema``'s own signature does not allow.
    """
    return pl.Schema(columns)

# Stable vocabulary for ``kind``. Parsers may only emit these.
KINDS: tuple[str, ...] = (
    "job_submit",  # a job entered the queue
    "job_start",  # a job / attempt / step / pod started running
    "job_end",  # it ended (``state`` and ``code`` say how)
    "init",  # trainer start-up banner (a new attempt of the training process)
    "init_done",  # start-up finished (MLPerf init_stop, "training ..." banner)
    "step",  # one optimizer step / iteration was logged
    "ckpt_save_begin",
    "ckpt_save_end",
    "ckpt_load",  # training resumed from the checkpoint at ``step``
    "eval_begin",
    "eval_end",
    "restart",  # a launcher / operator restarted workers
    "error",
    "warning",
    "node_state",  # node up/down/drain/not-ready; ``state`` holds the new state
    "heartbeat",  # an external liveness probe saw the job (no progress implied)
    "info",  # recognised, worth keeping (comm init, topology) but not an event above
)

SEVERITIES: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")

SOURCES: tuple[str, ...] = ("slurm", "nccl", "kubernetes", "trainer", "kernel")

# name -> (dtype, doc). Order is the column order of events.parquet.
_EVENT_COLUMNS: dict[str, tuple[pl.DataType, str]] = {
    "ts": (UTC_US, "When the record was written, UTC, microseconds; null when truly unknown."),
    "ts_inferred": (
        pl.Boolean(),
        "True when ts was not on the line: placed from neighbouring lines, iteration timing or an assumed year "
        "(or null: a file with no clock at all).",
    ),
    "job_id": (pl.String(), "Scheduler job id (Slurm job / array task, Kubernetes job or pod owner) when known."),
    "attempt": (pl.Int32(), "Restart count of the job when the record says it (requeue, torchrun restart); else null."),
    "source": (pl.String(), "Log family: slurm | nccl | kubernetes | trainer | kernel | a plugin's own."),
    "parser": (
        pl.String(),
        "Parser plugin that produced the row; `derived` for rows computed from several records "
        "(loss spikes, toranalyze/ingest/derived.py).",
    ),
    "kind": (pl.String(), "What happened, one of KINDS."),
    "severity": (pl.String(), "debug | info | warning | error | critical."),
    "node": (pl.String(), "Host name the record implicates or came from."),
    "rank": (pl.Int32(), "Global rank (or local rank when only that is known, see message)."),
    "gpu": (pl.Int32(), "GPU index on the node, when known."),
    "device": (pl.String(), "PCI bus id of the device (Xid lines, NCCL busId), normalized as 0000:3b:00."),
    "n_nodes": (pl.Int32(), "Nodes allocated to the job, on records that state it (sacct, allocation lines)."),
    "n_gpus": (pl.Int32(), "GPUs allocated to the job (or world size), on records that state it."),
    "step": (pl.Int64(), "Training step / iteration (for checkpoints: the checkpoint's step); null past 10^12."),
    "step_time_s": (pl.Float64(), "Seconds the step took as reported by the trainer; null when negative or past 10^9."),
    "loss": (pl.Float64(), "Training loss on step rows (NaN when the trainer logged NaN / nothing)."),
    "duration_s": (pl.Float64(), "Duration the record itself reports (checkpoint save, eval, job elapsed); null when "
                   "negative or past 10^9 s."),
    "code": (pl.String(), "Numeric code as text: Xid number, exit code, signal, NCCL error number."),
    "state": (
        pl.String(),
        "Scheduler / pod / node state or reason: COMPLETED, TIMEOUT, NODE_FAIL, OOMKilled, Evicted, DOWN, ...",
    ),
    "failure_class": (pl.String(), "Classified failure class (taxonomy in docs/taxonomy.md); null for non-failures."),
    "rule": (pl.String(), "Id of the classification rule that set failure_class."),
    "message": (pl.String(), "The record's text with launcher/collector prefixes removed (truncated to 4 KiB)."),
    "file": (pl.String(), "Input file the record came from (as given on the command line)."),
    "line": (pl.Int64(), "1-based line number of the record's first line in the (decompressed) file."),
    "line_end": (pl.Int64(), "Last line of a multi-line record (a traceback); null for one-line records."),
}

# Columns a parser returns. Time is raw; the pipeline fills source/parser/file,
# normalizes time and classifies.
_RAW_ONLY: dict[str, tuple[pl.DataType, str]] = {
    "ts": (NAIVE_US, "Wall-clock time as written on the line (naive)."),
    "ts_offset_s": (
        pl.Int32(),
        "UTC offset of ts in seconds when the line states a zone (0 for Z); null means 'use --tz'.",
    ),
    "ts_year_known": (pl.Boolean(), "False when the format has no year (glog, syslog); the pipeline infers it."),
}

EVENT_SCHEMA: pl.Schema = pl.Schema({k: v[0] for k, v in _EVENT_COLUMNS.items()})
COLUMN_DOCS: dict[str, str] = {k: v[1] for k, v in _EVENT_COLUMNS.items()}

_NOT_FROM_PARSER = {"ts", "source", "parser", "failure_class", "rule", "file"}
RAW_SCHEMA: pl.Schema = pl.Schema(
    {
        **{k: v[0] for k, v in _RAW_ONLY.items()},
        **{k: v[0] for k, v in _EVENT_COLUMNS.items() if k not in _NOT_FROM_PARSER},
    }
)
RAW_COLUMN_DOCS: dict[str, str] = {
    **{k: v[1] for k, v in _RAW_ONLY.items()},
    **{k: v for k, v in COLUMN_DOCS.items() if k not in _NOT_FROM_PARSER},
}
# Columns a parser must always fill (the rest may be null).
RAW_REQUIRED: tuple[str, ...] = ("kind", "severity", "message", "line")

MESSAGE_MAX = 4096
_FLAG_DEFAULTS = {"ts_inferred": False, "ts_year_known": True}


def conform_to(frame: pl.LazyFrame | pl.DataFrame, schema: pl.Schema | Mapping[str, pl.DataType]) -> pl.LazyFrame:
    """Select ``schema``'s columns in order: cast the present ones, add the missing ones as nulls.

    The time flags get their defaults instead of nulls (``ts_inferred`` False, ``ts_year_known``
    True), so a parser only states them when they differ.
    """
    lf = frame.lazy()
    have = lf.collect_schema()
    exprs: list[pl.Expr] = []
    for name, dtype in schema.items():
        if name in have:
            col = pl.col(name).cast(dtype, strict=False)
            exprs.append(col.fill_null(_FLAG_DEFAULTS[name]) if name in _FLAG_DEFAULTS else col)
        elif name in _FLAG_DEFAULTS:
            exprs.append(pl.lit(_FLAG_DEFAULTS[name]).alias(name))
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
    return lf.select(exprs)


def conform_raw(frame: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    """A parser's rows in RAW_SCHEMA (see conform_to); messages cut to MESSAGE_MAX."""
    return conform_to(frame, RAW_SCHEMA).with_columns(pl.col("message").str.slice(0, MESSAGE_MAX))


# Measures a record reports and their bounds: a value no run can give (a negative or infinite
# duration, a step counter of 19 digits) is a mangled token, and is null like any other
# unreadable field. Left in, one such value overflows every sum of time it joins.
MAX_DURATION_S = 1e9  # about 32 years
MAX_STEP = 10**12  # a trillion steps: 30 years at a millisecond a step
BOUNDS: dict[str, tuple[float, float]] = {
    "step_time_s": (0.0, MAX_DURATION_S), "duration_s": (0.0, MAX_DURATION_S), "step": (0, MAX_STEP)}


def sane_measures(frame: pl.LazyFrame) -> pl.LazyFrame:
    """``frame`` with each column of BOUNDS outside its bounds (or NaN) made null."""
    return frame.with_columns(
        pl.when(pl.col(c).is_between(lo, hi)).then(pl.col(c)).alias(c) for c, (lo, hi) in BOUNDS.items())


def _check(schema: Mapping[str, pl.DataType], want: pl.Schema, who: str, what: str) -> None:
    missing = [c for c in want if c not in schema]
    wrong = [f"{c} is {schema[c]}, expected {t}" for c, t in want.items() if c in schema and schema[c] != t]
    extra = [c for c in schema if c not in want]
    problems = []
    if missing:
        problems.append("missing columns: " + ", ".join(missing))
    if wrong:
        problems.append("wrong types: " + "; ".join(wrong))
    if extra:
        problems.append("unexpected columns: " + ", ".join(extra))
    if problems:
        raise SchemaError(f"{who} returned a frame that does not match the {what} schema: " + " | ".join(problems))


def validate_raw(frame: pl.LazyFrame | pl.DataFrame, parser: str) -> None:
    """Raise SchemaError naming the parser and offending columns."""
    schema = frame.collect_schema() if isinstance(frame, pl.LazyFrame) else frame.schema
    _check(schema, RAW_SCHEMA, f"parser {parser!r}", "raw event")


def validate_kinds(frame: pl.DataFrame, parser: str) -> None:
    """Raise SchemaError when a parser emitted an unknown kind/severity or null required fields."""
    kind_ok, sev_ok = frame.select(pl.col("kind").is_in(KINDS).all(), pl.col("severity").is_in(SEVERITIES).all()).row(0)
    bad_kind = [] if kind_ok else frame.filter(~pl.col("kind").is_in(KINDS))["kind"].unique().to_list()
    bad_sev = [] if sev_ok else frame.filter(~pl.col("severity").is_in(SEVERITIES))["severity"].unique().to_list()
    nulls = [c for c in RAW_REQUIRED if frame[c].null_count()]
    problems = []
    if bad_kind:
        problems.append(f"unknown kind values {bad_kind}")
    if bad_sev:
        problems.append(f"unknown severity values {bad_sev}")
    if nulls:
        problems.append(f"null values in required columns {nulls}")
    if problems:
        raise SchemaError(f"parser {parser!r}: " + "; ".join(problems))


def validate_events(frame: pl.LazyFrame | pl.DataFrame, who: str = "pipeline") -> None:
    schema = frame.collect_schema() if isinstance(frame, pl.LazyFrame) else frame.schema
    _check(schema, EVENT_SCHEMA, who, "event")


def empty_raw() -> pl.LazyFrame:
    """No rows, in RAW_SCHEMA (what a parser returns when it found nothing)."""
    return pl.LazyFrame(schema=RAW_SCHEMA)
