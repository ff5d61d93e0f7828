"""The job report: one HTML page per ``analyze`` run with a section per job.

``render_job_report`` is pure: the analysis frames (attempts, incidents, slow periods, tor, and
the placed step rows), the events (for evidence lines, GPU counts and data quality) and the
ingest summary in; an HTML string out. Everything shown that came from a log is escaped. Secrets
are taken out before, where a run's outputs are made (``fleet/pipeline.py::redact_outputs``):
``redacted`` only says so on the page. Clock offsets come computed (``reconstruct/skew.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from toranalyze.reconstruct.analysis import Analysis
from toranalyze.reconstruct.skew import ClockSkew
from toranalyze.reconstruct.tables import BUCKETS
from toranalyze.report import figures
from toranalyze.report.html import PLOTLY_JS, Page, cards, clip_times, esc, fmt_duration, long_table, scroll_box, table

EVIDENCE_SHOWN = 3
FIRST_INCIDENTS = 10  # listed under the header; the rest below the figures
MAX_INCIDENT_ROWS = 2000
SKEW_ROWS = 20


@dataclass
class JobReportInput:
    analysis: Analysis
    events: pl.DataFrame
    summary: dict[str, Any]  # IngestResult.summary()
    shapes: pl.DataFrame | None = None  # unrecognised line shapes: count, shape, first
    clock_skew: ClockSkew | None = None  # reconstruct/skew.py::clock_skew; None: the section is left out


def render_job_report(inp: JobReportInput, *, title: str | None = None, redacted: bool = False,
                      plotly_src: str = PLOTLY_JS, jobs: list[str] | None = None) -> str:
    """The whole page. ``jobs`` limits it to these jobs (default: every job of the analysis)."""
    an = _clipped(inp.analysis)
    tor = an.tor if jobs is None else an.tor.filter(pl.col("job").is_in(jobs))
    events, incidents = clip_times(inp.events), an.incidents
    names = tor["job"].to_list()
    page = Page(title or (names[0] if len(names) == 1 else f"{len(names)} jobs"), plotly_src)
    page.add(f"<h1>{esc(page.title)}</h1>")
    if len(names) > 1:
        links = "".join(f'<a href="#job-{i}">{esc(n)}</a>' for i, n in enumerate(names))
        page.add(f'<nav class="toc">{links}<a href="#data-quality">data quality</a></nav>')
    if tor.height == 0:
        page.add('<p class="warn">No training progress was found in the inputs: no TOR to compute.</p>')
    for i, row in enumerate(tor.iter_rows(named=True)):
        job = row["job"]
        frames = JobFrames(an.attempts.filter(pl.col("job") == job), incidents.filter(pl.col("job") == job),
                           an.slow_periods.filter(pl.col("job") == job), _frame_for(an.progress, job),
                           _frame_for(an.checkpoints, job), _job_events(events, row, tor.height))
        _job_section(page, i, row, frames)
    _data_quality(page, events, inp.summary, inp.shapes, an.notes, inp.clock_skew)
    page.add('<footer>toranalyze · times in UTC · TOR = optimal / observed training time (arXiv 2408.07482)'
             f'{" · secrets redacted" if redacted else ""}</footer>')
    return page.render()


def _clipped(an: Analysis) -> Analysis:
    """The analysis with its times clipped to what the page can show (``html.clip_times``)."""
    frames: dict[str, Any] = {f.name: clip_times(v) for f in dataclasses.fields(an)
                              if isinstance(v := getattr(an, f.name), pl.DataFrame)}
    return dataclasses.replace(an, **frames)


def _frame_for(df: pl.DataFrame | None, job: str) -> pl.DataFrame | None:
    return None if df is None else df.filter(pl.col("job") == job)


def _job_events(events: pl.DataFrame, row: dict[str, Any], n_jobs: int) -> pl.DataFrame:
    """The job's own events: those of its scheduler ids (all events when the run has one job)."""
    if n_jobs == 1 or not row.get("job_ids"):
        return events
    return events.filter(pl.col("job_id").is_in(row["job_ids"]) | pl.col("job_id").is_null())


def gpu_count(events: pl.DataFrame) -> int | None:
    """GPUs the job ran on: the largest count a source states, else distinct (node, gpu) or ranks seen."""
    if "n_gpus" in events.columns and events["n_gpus"].drop_nulls().len():
        return int(events["n_gpus"].max())  # type: ignore[arg-type]
    ranks = events["rank"].drop_nulls().n_unique() if "rank" in events.columns else 0
    return ranks or None


def _when(t: datetime | None) -> str:
    # isoformat, not strftime: strftime writes year 1 as "1", isoformat as "0001"
    return t.replace(tzinfo=None).isoformat(" ", "seconds") if t else "-"


@dataclass(frozen=True)
class JobFrames:
    """One job's share of the analysis and of the events, as its section shows them."""

    attempts: pl.DataFrame
    incidents: pl.DataFrame
    slow: pl.DataFrame
    progress: pl.DataFrame | None
    checkpoints: pl.DataFrame | None
    events: pl.DataFrame


def _job_section(page: Page, i: int, row: dict[str, Any], frames: JobFrames) -> None:
    attempts, incidents, slow, events = frames.attempts, frames.incidents, frames.slow, frames.events
    prog, ckpt = frames.progress, frames.checkpoints
    gpus = gpu_count(events)
    page.add(f'<section class="job" id="job-{i}" data-job="{esc(row["job"])}">')
    page.add(f"<h2>job {esc(row['job'])}</h2>")
    unclean = "" if row.get("ended_cleanly") else ' · <span class="warn">no clean end in the logs</span>'
    page.add(f'<p class="sub">{_when(row.get("t_start"))} → {_when(row.get("t_end"))} UTC · '
             f"{esc(row.get('n_attempts'))} attempts · ideal step "
             f"{(row.get('ideal_step_time_s') or 0):.3f} s ({esc(row.get('ideal_step_source'))})"
             f"{unclean}</p>")
    page.add(cards([
        ("TOR", f"{row['tor']:.4f}" if row.get("tor") is not None else "-"),
        ("observed", fmt_duration(row.get("t_obs_s"))),
        ("optimal", fmt_duration(row.get("useful_s"))),
        ("GPUs", str(gpus) if gpus else "unknown"),
        ("incidents", str(incidents.height)),
        ("steps lost", str(row.get("steps_lost") or 0)),
    ]))
    if not gpus:
        page.add('<p class="warn">No log states this job\'s size (an allocation, a world size, a GPU limit): '
                 "its GPU-hours and lost GPU-hours are unknown, and a fleet counts its running time as 0 GPU-hours. "
                 "Add the scheduler's accounting or the launcher's output to the inputs.</p>")
    lines = _evidence_by_incident(incidents, events) if incidents.height else {}
    _what_happened(page, i, incidents, lines, row.get("path"))
    page.add("<h3>Where the time went</h3>")
    page.figure(figures.ledger_bar(row, BUCKETS), height=170)
    rows = [(esc(b), fmt_duration(row.get(f"{b}_s")),
             f"{(row.get(f'{b}_s') or 0) / row['t_obs_s']:.1%}" if row.get("t_obs_s") else "-") for b in BUCKETS]
    page.add(table(["bucket", "time", "share"], rows, [False, True, True]))
    page.add("<h3>Timeline: attempts, incidents and their phases, checkpoints, slow periods</h3>")
    page.figure(figures.timeline(attempts, incidents, ckpt, slow), height=330)
    if prog is not None and prog.height:
        page.add("<h3>Progress: steps over wall time (rollbacks show as drops)</h3>")
        page.figure(figures.progress_curve(prog), height=340)
        page.add("<h3>Step time, slow periods and their suspect node</h3>")
        page.figure(figures.step_time(prog, slow, row.get("ideal_step_time_s")), height=320)
    if incidents.height:
        page.add(f'<h3 id="incidents-{i}">Incidents in detail: cost per root cause, phases, symptoms, reasons '
                 "and every evidence line</h3>")
        page.figure(figures.cost_by_cause(incidents), height=280)
        page.add(_incident_table(incidents, lines, row.get("path")))
    if slow.height:
        page.add("<h3>Slow periods</h3>")
        srows = [(esc(_when(s["start"])), fmt_duration((s["end"] - s["start"]).total_seconds()),
                  f"{s['factor']:.2f}×" if s["factor"] else "-", esc(s["steps"]), fmt_duration(s["slowdown_s"]),
                  esc(s["node"] or "-"),
                  esc(", ".join(rel_path(e, row.get("path")) for e in (s["evidence"] or [])[:3])))
                 for s in slow.iter_rows(named=True)]
        page.add(scroll_box(table(["start", "length", "factor", "steps", "slowdown", "suspect node", "evidence"],
                                  srows, [False, True, True, True, True, False, False]), len(srows)))
    page.add("</section>")


def rel_path(ref: str, root: str | None) -> str:
    """An evidence path relative to the job's directory (shorter, and the same in every table)."""
    if root and ref.startswith(root.rstrip("/") + "/"):
        return ref[len(root.rstrip("/")) + 1:]
    return ref


def evidence_lines(incidents: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """(incident, ref, text): each evidence ``file:line`` with the message of its record."""
    ev = (incidents.select("incident", "evidence").explode("evidence").drop_nulls("evidence")
          .with_columns(pl.int_range(pl.len()).over("incident").alias("_k"),
                        pl.col("evidence").str.extract(r"^(.*):(\d+)$", 1).alias("file"),
                        pl.col("evidence").str.extract(r"^(.*):(\d+)$", 2).cast(pl.Int64).alias("line")))
    # Several records of one line: the first message in text order, whatever the events' order.
    text = (events.select("file", "line", "message").join(ev.select("file", "line").unique(), on=["file", "line"],
                                                          how="semi")
            .sort("file", "line", "message", nulls_last=True)
            .unique(["file", "line"], keep="first", maintain_order=True))
    return ev.join(text, on=["file", "line"], how="left").sort("incident", "_k").select(
        "incident", pl.col("evidence").alias("ref"), pl.col("message").alias("text"))


Evidence = dict[int, list[tuple[str, str | None]]]


def _evidence_by_incident(incidents: pl.DataFrame, events: pl.DataFrame) -> Evidence:
    """Each incident's evidence as (``file:line``, the record's text), in the incident's order."""
    by_inc: Evidence = {}
    for inc, ref, text in evidence_lines(incidents, events).iter_rows():
        by_inc.setdefault(inc, []).append((ref, text))
    return by_inc


def _evidence_item(ref: str, text: str | None, root: str | None) -> str:
    return f'<div class="ev"><span class="loc">{esc(rel_path(ref, root))}</span> {esc(text or "")}</div>'


def _cause(r: dict[str, Any]) -> str:
    return esc(r["root_cause"]) + (' <span class="badge planned">planned</span>' if r["planned"] else "")


def _nodes(nodes: list[str] | None) -> str:
    """Node names, each kept on one line (a name like gpu-004 is not broken at its hyphen)."""
    return ", ".join(f'<span class="nobr">{esc(n)}</span>' for n in nodes or []) or "-"


def _what_happened(page: Page, i: int, incidents: pl.DataFrame, lines: Evidence, root: str | None) -> None:
    """The incidents first, right under the header: what most readers open the page for. The
    first ``FIRST_INCIDENTS`` with their first evidence line in full; the rest, and every
    detail, in the table below the figures."""
    if not incidents.height:
        page.add('<p class="note">No incidents.</p>')
        return
    page.add("<h3>What happened: the incidents</h3>")
    rows = []
    for r in incidents.sort("incident").head(FIRST_INCIDENTS).iter_rows(named=True):
        ev = lines.get(r["incident"], [])
        rows.append((str(r["incident"] + 1), esc(_when(r["t_last_progress"] or r["t_detected"])), _cause(r),
                     _nodes(r["nodes"]), fmt_duration(r["downtime_s"]),
                     "-" if r["lost_steps"] is None else esc(r["lost_steps"]),
                     _evidence_item(*ev[0], root) if ev else "-"))
    page.add(table(["#", "when (UTC)", "root cause", "nodes", "downtime", "lost steps", "first evidence line"],
                   rows, [True, False, False, False, True, True, False], cls="t incidents"))
    rest = incidents.height - len(rows)
    page.add(f'<p class="note">{f"{rest} more incidents, and " if rest > 0 else ""}'
             f'phases, symptoms, reasons and every evidence line: <a href="#incidents-{i}">incidents in detail</a>'
             "</p>")


def _incident_table(incidents: pl.DataFrame, lines: Evidence, root: str | None) -> str:
    rows = []
    shown = incidents.sort("incident").head(MAX_INCIDENT_ROWS)
    for r in shown.iter_rows(named=True):
        phases = "<br>".join(f"{esc(label)} {esc(_when(r[col])[11:])}" for col, label, _, _ in figures.PHASES
                             if r[col] is not None)
        items = [_evidence_item(ref, text, root) for ref, text in lines.get(r["incident"], [])]
        evidence = "".join(items[:EVIDENCE_SHOWN])
        if len(items) > EVIDENCE_SHOWN:
            evidence += (f"<details><summary>{len(items) - EVIDENCE_SHOWN} more</summary>"
                         f"{''.join(items[EVIDENCE_SHOWN:])}</details>")
        rows.append((
            str(r["incident"] + 1), esc(_when(r["t_last_progress"] or r["t_detected"])), _cause(r),
            _nodes(r["nodes"]), phases or "-",
            "-" if r["lost_steps"] is None else esc(r["lost_steps"]), fmt_duration(r["downtime_s"]),
            esc(", ".join(r["symptoms"] or []) or "-"),
            f'<span class="badge">{esc(r["confidence"])}</span> {esc(r["reason"])}', evidence or "-",
        ))
    more = ("" if incidents.height <= MAX_INCIDENT_ROWS else
            f'<p class="note">first {MAX_INCIDENT_ROWS} of {incidents.height} incidents shown; '
            "all are in incidents.parquet</p>")
    return long_table(table(
        ["#", "when (UTC)", "root cause", "nodes", "phases (UTC)", "lost steps", "downtime", "symptoms",
         "confidence and reason", "evidence"], rows,
        [True, False, False, False, False, True, True, False, False, False], cls="t incident-details"),
        len(rows)) + more


def _data_quality(page: Page, events: pl.DataFrame, summary: dict[str, Any], shapes: pl.DataFrame | None,
                  notes: list[str], skew: ClockSkew | None) -> None:
    page.add('<section id="data-quality"><h2>Data quality</h2>')
    files = pl.DataFrame(summary.get("per_file") or [], schema={
        "path": pl.String, "parser": pl.String, "lines": pl.Int64, "events": pl.Int64, "covered": pl.Int64,
        "error": pl.String}, strict=False)
    if files.height:
        per = (files.with_columns(pl.col("parser").fill_null("(unread)"))
               .group_by("parser").agg(pl.len().alias("files"), pl.col("lines").sum(), pl.col("covered").sum(),
                                       pl.col("events").sum(), pl.col("error").is_not_null().sum().alias("failed"))
               .sort(["lines", "parser"], descending=[True, False]))  # ties by name: the same page each run
        cols = per.select("parser", "files", "lines", "covered", "events", "failed")
        rows = [(esc(p), str(f), str(n), str(e), f"{c / n:.1%}" if n else "-", str(x))
                for p, f, n, c, e, x in cols.iter_rows()]
        page.add("<h3>Coverage per parser (recognised share of non-blank lines)</h3>")
        page.add(table(["parser", "files", "lines", "events", "coverage", "failed"], rows,
                       [False, True, True, True, True, True]))
    if events.height:
        inf = (events.group_by("source")
               .agg(pl.len().alias("n"), pl.col("ts_inferred").fill_null(False).sum().alias("i"),
                    pl.col("ts").is_null().sum().alias("u"))
               .sort(["n", "source"], descending=[True, False]))  # ties by name: the same page each run
        trows = [(esc(s), str(n), str(i), f"{i / n:.1%}", str(u)) for s, n, i, u in inf.iter_rows()]
        page.add("<h3>Timestamps per source</h3>")
        page.add(table(["source", "events", "time inferred from a neighbour", "share", "no time"], trows,
                       [False, True, True, True, True]))
    if events.height and skew is not None:
        _clock_skew(page, skew)
    if shapes is not None and shapes.height:
        page.add("<h3>Most common unrecognised line shapes</h3>")
        page.add(table(["count", "shape", "first seen"],
                       [(str(c), f'<span class="ev">{esc(s)}</span>', esc(f)) for c, s, f in
                        shapes.select("count", "shape", pl.col("first").cast(pl.String)).iter_rows()],
                       [True, False, False]))
    problems = list(summary.get("input_errors") or []) + [
        f"{p}: {e}" for p, e in files.filter(pl.col("error").is_not_null()).select("path", "error").iter_rows()
    ] if files.height else list(summary.get("input_errors") or [])
    if problems or notes:
        page.add("<h3>Notes and warnings</h3><ul>" + "".join(f"<li>{esc(x)}</li>" for x in [*problems, *notes])
                 + "</ul>")
    page.add("</section>")


def _clock_skew(page: Page, skew: ClockSkew) -> None:
    """Clock offsets between files and between nodes (reconstruct/skew.py), largest first."""
    page.add('<h3 id="clock-skew">Clock skew</h3>')
    for u_skew in skew.units:
        unit, off, bad = u_skew.unit, u_skew.offsets, u_skew.skewed
        ref = off.filter(pl.col("reference"))["unit"].to_list()
        names = _short_paths(off["unit"].to_list()) if unit == "file" else off["unit"].to_list()
        page.add(f'<p class="note">{off.height} {unit}s stamp moments that another {unit} stamps too (a job\'s '
                 f"start or end, a training step); offsets are relative to "
                 f"{esc(names[off['unit'].to_list().index(ref[0])]) if ref else f'the median {unit}'}. "
                 f'<span class="{"warn" if bad.height else ""}" data-key="skewed-{unit}s">{bad.height}</span> '
                 f"of them {'is' if bad.height == 1 else 'are'} off by more than {skew.threshold_s:g} s (and "
                 "twice the spread of its moments) on at least 3 moments.</p>")
        flagged = set(bad["unit"].to_list())
        cols = off.select("unit", "source", "anchors", "offset_s", "spread_s", "reference")
        rows = [(esc(n), esc(src), str(a), f"{o:+.2f}", f"{sp:.2f}",
                 '<span class="badge planned">reference</span>' if r else
                 ('<span class="warn">skewed</span>' if u in flagged else ""))
                for n, (u, src, a, o, sp, r) in zip(names, cols.iter_rows(), strict=True)][:SKEW_ROWS]
        page.add(table([unit, "source", "moments", "offset (s)", "spread (s)", "status"], rows,
                       [False, False, True, True, True, False], cls="t skew"))
    if not skew.units:
        page.add('<p class="note">No moment is stamped by two files or nodes: clock skew cannot be estimated.</p>')


def _short_paths(paths: list[str]) -> list[str]:
    """Paths relative to their common folder (the input root, as elsewhere on the page)."""
    import os

    if len(paths) < 2:
        return [os.path.basename(p) for p in paths]
    try:
        root = os.path.commonpath(paths)
    except ValueError:  # absolute and relative paths mixed
        return paths
    return [os.path.relpath(p, root) for p in paths]
