"""sacct tables: ``-P``/``--parsable2`` ('|' between cells), ``--parsable`` (a trailing '|'
too) and the fixed-width default (a header over a line of dashes, cells left- or
right-aligned, a trailing '+' marking a cut cell).

A table becomes job_submit / job_start / job_end rows, one set per sacct row: a
job's steps (``.batch``, ``.extern``, ``.0``) are rows of their own, because a job
can read COMPLETED while one of its steps died.

Finding a table is per header line (a handful per file, plain Python); reading its
rows is one set of column expressions per table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl
from toranalyze_parsers.slurm.common import (
    TERMINAL,
    base_job_id,
    elapsed_seconds,
    hostlist_count,
    normalize_state,
    single_host,
    state_severity,
)

from toranalyze.parser_api import BLOCK_BYTES, FILE_LINES, Chunks, ts_iso, ts_month_name

# sacct --helpformat names (lower-cased). A header must consist of these only.
FIELDS = frozenset(
    """account admincomment alloccpus allocgres allocnodes alloctres associd avecpu avecpufreq avediskread
    avediskwrite avepages averss avevmsize blockid cluster comment constraints consumedenergy
    consumedenergyraw container cputime cputimeraw dbindex derivedexitcode elapsed elapsedraw eligible end
    exitcode extra failednode flags gid group jobid jobidraw jobname layout licenses maxdiskread
    maxdiskreadnode maxdiskreadtask maxdiskwrite maxdiskwritenode maxdiskwritetask maxpages maxpagesnode
    maxpagestask maxrss maxrssnode maxrsstask maxvmsize maxvmsizenode maxvmsizetask mcslabel mincpu
    mincpunode mincputask ncpus nnodes nodelist ntasks partition planned plannedcpu plannedcpuraw priority
    qos qosraw qosreq reason reqcpufreq reqcpufreqgov reqcpufreqmax reqcpufreqmin reqcpus reqgres reqmem
    reqnodes reqtres reservation reservationid reserved restarts sluid start state stderr stdin stdout
    submit submitline suspended systemcomment systemcpu timelimit timelimitraw totalcpu tresusageinave
    tresusageinmax tresusageinmaxnode tresusageinmaxtask tresusageinmin tresusageinminnode
    tresusageinmintask tresusageintot tresusageoutave tresusageoutmax tresusageoutmaxnode
    tresusageoutmaxtask tresusageoutmin tresusageoutminnode tresusageoutmintask tresusageouttot uid user
    usercpu wckey wckeyid workdir""".split()
)
_CORE = {"state", "exitcode", "start", "end", "elapsed", "submit"}
_DASHES = re.compile(r"^\s*-+(?: -+)*\s*$")


@dataclass(frozen=True)
class Table:
    header_line: int  # 1-based line of the header
    names: tuple[str, ...]  # header cells as printed
    pipe: bool
    spans: tuple[tuple[int, int], ...] = ()  # fixed width: (start, width) per column


def _field(name: str) -> str | None:
    """Canonical lower-case field of a header cell ('JobID', 'NodeLi+' -> 'nodelist')."""
    key = name.strip().lower()
    if key in FIELDS:
        return key
    if key.endswith("+") and len(key) > 2:
        cands = sorted(f for f in FIELDS if f.startswith(key[:-1]))
        return cands[0] if cands else None
    return None


def _header_names(line: str) -> tuple[tuple[str, ...], bool] | None:
    """Header cells and whether the table is '|'-separated; None when the line is not a sacct header."""
    text = line.strip()
    pipe = "|" in text
    names = tuple(c.strip() for c in (text.rstrip("|").split("|") if pipe else text.split()))
    if len(names) < 2 or any(not n for n in names):
        return None
    fields = [_field(n) for n in names]
    if any(f is None for f in fields):
        return None
    if not ({"jobid", "jobidraw"} & set(fields)) or not (_CORE & set(fields)):
        return None
    return names, pipe


def find_tables(lines: list[tuple[int, str]]) -> list[Table]:
    """Tables whose header is among ``lines`` ((line number, raw) pairs, in order)."""
    tables = []
    for i, (num, raw) in enumerate(lines):
        found = _header_names(raw)
        if found is None:
            continue
        names, pipe = found
        if pipe:
            tables.append(Table(num, names, True))
            continue
        if i + 1 >= len(lines) or not _DASHES.match(lines[i + 1][1]):
            continue
        dashes = lines[i + 1][1]
        spans = tuple((m.start(), m.end() - m.start()) for m in re.finditer(r"-+", dashes))
        if len(spans) == len(names):
            tables.append(Table(num, names, False, spans))
    return tables


def sniff(head: str) -> bool:
    """True when the file starts (after blank, '#' or '$ sacct' lines) with a sacct header."""
    rows = head.splitlines()[:12]
    for i, row in enumerate(rows):
        if not row.strip() or row.lstrip().startswith(("#", "$")):
            continue
        return bool(find_tables([(i, row)] + ([(i + 1, rows[i + 1])] if i + 1 < len(rows) else [])))
    return False


def _keys(table: Table) -> list[str]:
    """Column keys: canonical field names, made unique when a field is listed twice."""
    keys: list[str] = []
    for name in table.names:
        key = _field(name) or name.lower()
        keys.append(key if key not in keys else f"{key}_{len(keys)}")
    return keys


def _cells(frame: pl.DataFrame, table: Table, end_line: int | None) -> tuple[pl.DataFrame, bool]:
    """The table's rows in ``frame`` split into named cells, and whether the table ended in it.

    Rows are the contiguous row-shaped lines after the header: the first other line ends the table.
    """
    start = table.header_line + (1 if table.pipe else 2)
    rows = frame.filter(pl.col("line") >= start)
    if end_line is not None:
        rows = rows.filter(pl.col("line") < end_line)
    rows = rows.filter(pl.col("raw").str.strip_chars() != "")
    keys = _keys(table)
    if table.pipe:
        src = pl.col("text").str.strip_chars()
        parts = src.str.split("|")
        shaped = (src.str.count_matches(r"\|") >= len(keys) - 1) & src.str.contains(r"^[0-9]")
        cells = [parts.list.get(j, null_on_oob=True).str.strip_chars().alias(k) for j, k in enumerate(keys)]
    else:
        src = pl.col("raw")
        # Each cell runs to the next column's start, so a value spilling into the separator survives.
        starts = [s for s, _ in table.spans]
        widths = [b - a for a, b in zip(starts, starts[1:], strict=False)] + [None]
        cells = [
            src.str.slice(s, w).str.strip_chars().alias(k) for s, w, k in zip(starts, widths, keys, strict=True)
        ]
        first = src.str.slice(table.spans[0][0], table.spans[0][1]).str.strip_chars()
        shaped = first.str.contains(r"^[0-9]+[\w.+\[\]%\-]*$")
    out = rows.with_columns(shaped.alias("_ok")).with_columns((~pl.col("_ok")).cum_sum().alias("_bad"))
    ended = bool(out.height) and bool(out["_bad"].max())
    out = out.filter(pl.col("_bad") == 0).select("line", *cells)
    # The message names every cell as 'Name=value', the job id first. A step's name ('batch',
    # 'python') is written StepName= so that JobName= always names the job itself.
    labels = [(k, n) for k, n in zip(keys, table.names, strict=True)]
    id_key = "jobid" if "jobid" in keys else "jobidraw"
    step_row = pl.col(id_key).str.contains(r"\.")

    def label(key: str, name: str) -> pl.Expr:
        if key == "jobname":
            return pl.when(step_row).then(pl.lit("StepName=")).otherwise(pl.lit(f"{name}="))
        return pl.lit(f"{name}=")

    parts_msg = [pl.lit("JobID=") + pl.col(id_key)] + [
        pl.when(pl.col(k) != "").then(label(k, n) + pl.col(k)) for k, n in labels if k != id_key
    ]
    return out.with_columns(pl.concat_str(parts_msg, separator=" ", ignore_nulls=True).alias("_message")), ended


def _time(cell: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(naive ts, year known) of a sacct time cell: ISO, or relative 'D Mon HH:MM'; Unknown/None -> null."""
    rel = cell.str.extract_groups(
        r"^(?P<d>[0-9]{1,2}) (?P<m>[A-Z][a-z]{2}) (?P<hm>[0-9][0-9]:[0-9][0-9](?::[0-9][0-9])?)$"
    )
    hms = pl.when(rel.struct.field("hm").str.len_chars() == 5).then(rel.struct.field("hm") + ":00").otherwise(
        rel.struct.field("hm")
    )
    relative = ts_month_name(rel.struct.field("m"), rel.struct.field("d"), hms)
    iso = ts_iso(cell)
    return pl.coalesce(iso, relative), iso.is_not_null() | relative.is_null()


def _col(name: str, have: set[str]) -> pl.Expr:
    return pl.col(name) if name in have else pl.lit(None, pl.String)


def _events(cells: pl.DataFrame) -> pl.LazyFrame:
    have = set(cells.columns)
    cells = cells.with_columns(normalize_state(_col("state", have)).alias("_state"))
    jobid = pl.coalesce(_col("jobid", have), _col("jobidraw", have))
    state = pl.col("_state")
    tres = _col("alloctres", have)
    nodelist = _col("nodelist", have)
    n_nodes = pl.coalesce(
        _col("nnodes", have).cast(pl.Int32, strict=False),
        _col("allocnodes", have).cast(pl.Int32, strict=False),
        tres.str.extract(r"(?:^|,)node=([0-9]+)", 1).cast(pl.Int32, strict=False),
        hostlist_count(nodelist),
    )
    n_gpus = pl.coalesce(
        tres.str.extract(r"gres/gpu=([0-9]+)", 1),
        tres.str.extract(r"gres/gpu:[^=,]+=([0-9]+)", 1),
        _col("allocgres", have).str.extract(r"gpu(?::[^:,(]+)?:([0-9]+)", 1),
    ).cast(pl.Int32, strict=False)
    elapsed = pl.coalesce(
        _col("elapsedraw", have).cast(pl.Float64, strict=False), elapsed_seconds(_col("elapsed", have))
    )
    common = [
        pl.col("line"),
        base_job_id(jobid).alias("job_id"),
        single_host(nodelist).alias("node"),
        n_nodes.alias("n_nodes"),
        n_gpus.alias("n_gpus"),
        _col("restarts", have).cast(pl.Int32, strict=False).alias("attempt"),
        pl.col("_message").alias("message"),
    ]
    # Every cell is read once, in one query; the three kinds of row then only pick rows and columns
    # (a small dump costs its queries, not its rows).
    times = [e.alias(f"_{part}_{cell}") for cell in ("submit", "start", "end")
             for part, e in zip(("ts", "yk"), _time(_col(cell, have)), strict=True)]
    read = cells.select(
        *common, *times, state.alias("_state"), jobid.str.contains(r"\.").alias("_is_step"),
        elapsed.alias("duration_s"), _col("exitcode", have).str.extract(r"^(-?[0-9]+)", 1).alias("code"),
    ).lazy()
    names = [e.meta.output_name() for e in common]
    frames = []
    # Submit and start rows carry the state the job entered then; the end row the final state.
    for kind, cell, when, row_state in (
        ("job_submit", "submit", ~pl.col("_is_step"), pl.lit("PENDING")),
        ("job_start", "start", state != "PENDING", pl.lit("RUNNING")),
        ("job_end", "end", state.is_in(TERMINAL), state),
    ):
        ts = pl.col(f"_ts_{cell}")
        # A table without an End column still tells how each job ended: keep the row, time unknown.
        dated = ts.is_not_null() | pl.lit(kind == "job_end" and "end" not in have)
        severity = state_severity(state) if kind == "job_end" else pl.lit("info")
        extra = ["duration_s", "code"] if kind == "job_end" else []
        frames.append(
            read.filter(when.fill_null(False) & dated).select(
                *names, *extra, row_state.alias("state"), ts.alias("ts"), pl.col(f"_yk_{cell}").alias("ts_year_known"),
                pl.lit(kind).alias("kind"), severity.alias("severity"),
            )
        )
    return pl.concat(frames, how="diagonal_relaxed").sort("line", maintain_order=True)


def parse_tables(
    frame: pl.DataFrame, tables: list[Table], *, spans: bool = False, ended: set[int] | None = None
) -> pl.LazyFrame | None:
    """Events of every table in ``frame`` (columns line, raw, text); None when there are none.

    ``frame`` may be one block of a longer file: ``ended`` carries the header lines of tables
    that already ended in an earlier block (updated in place). With ``spans``, each table also
    yields one ``info`` record from its header to its last row, so a table inside a text log
    counts as understood.
    """
    ended = set() if ended is None else ended
    out = []
    for i, table in enumerate(tables):
        if table.header_line in ended:
            continue
        # A table ends at the next header, or with its file (files of a batch follow each other).
        file_end = (table.header_line // FILE_LINES + 1) * FILE_LINES
        end = min(tables[i + 1].header_line, file_end) if i + 1 < len(tables) else file_end
        cells, stop = _cells(frame, table, end)
        if stop:
            ended.add(table.header_line)
        if not cells.height:
            continue
        out.append(_events(cells))
        if spans:
            last = cells["line"].max()
            out.append(
                pl.LazyFrame(
                    {
                        "line": [table.header_line],
                        "line_end": [last],
                        "kind": ["info"],
                        "severity": ["info"],
                        "message": [f"sacct table ({cells.height} rows): " + ", ".join(table.names)],
                    },
                    schema_overrides={"line": pl.Int64, "line_end": pl.Int64},
                )
            )
    return pl.concat(out, how="diagonal_relaxed").sort("line", maintain_order=True) if out else None


def tables_in_lines(lines: pl.LazyFrame) -> pl.LazyFrame | None:
    """sacct tables printed inside a text log (an epilog running sacct): their events, or None."""
    cand = (
        lines.filter(pl.col("raw").str.contains(r"(?i)\bJobID"))
        .select("line")
        .collect()["line"]
    )
    if cand.is_empty():
        return None
    wanted = set(cand.to_list()) | {n + 1 for n in cand.to_list()}
    near = lines.filter(pl.col("line").is_in(list(wanted))).select("line", "raw").collect()
    tables = find_tables(list(zip(near["line"].to_list(), near["raw"].to_list(), strict=True)))
    # A header line and its dashes line must be neighbours in the file, not only in this selection.
    tables = [t for t in tables if t.pipe or (t.header_line + 1) in wanted]
    if not tables:
        return None
    frame = lines.select("line", "raw", "text").collect()
    return parse_tables(frame, tables, spans=True)


def _header_candidates(chunks: Chunks) -> list[tuple[int, str]]:
    """(line, raw) of every line naming JobID and of the line after it, over a whole file."""
    found: list[tuple[int, str]] = []
    carry: list[int] = []  # a header on a block's last line: its next line opens the next block
    for chunk in chunks:
        named = chunk.filter(pl.col("raw").str.contains(r"(?i)\bJobID"))["line"]
        want = pl.concat([named, named + 1, pl.Series(carry, dtype=pl.Int64)])
        hits = chunk.filter(pl.col("line").is_in(want.implode()))
        found.extend(zip(hits["line"].to_list(), hits["raw"].to_list(), strict=True))
        carry = [chunk["line"][-1] + 1] if named.len() and named[-1] == chunk["line"][-1] else []
    return sorted(set(found))


def parse_document(path: str, block_bytes: int = BLOCK_BYTES) -> pl.LazyFrame | None:
    """Events of a sacct document, read block by block (a fleet-wide dump can be large)."""
    cands = _header_candidates(Chunks(path, block_bytes))
    lines = {n for n, _ in cands}
    tables = [t for t in find_tables(cands) if t.pipe or (t.header_line + 1) in lines]
    if not tables:
        return None
    out = []
    ended: set[int] = set()
    for chunk in Chunks(path, block_bytes):
        live = [t for t in tables if t.header_line <= chunk["line"][-1]]
        if not live:
            continue
        frame = chunk.with_columns(pl.col("raw").alias("text"))
        events = parse_tables(frame, live, ended=ended)
        if events is not None:
            out.append(events.collect())
    return pl.concat(out, how="diagonal_relaxed").lazy() if out else None
