"""The terminal summary of ``analyze``: each job's ledger and incidents, for people."""

from __future__ import annotations

from typing import Any

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from toranalyze.reconstruct.tables import BUCKETS
from toranalyze.report.html import clip_times, fmt_duration


def _short_evidence(ref: str, root: str | None) -> str:
    """'dir/run/nodes/n1/kern.log:7' -> 'nodes/n1/kern.log:7': relative to the job's folder, as in
    the report (the tables keep the full path)."""
    from toranalyze.report.job import rel_path

    return rel_path(ref, root)


def print_summary(analysis: object, console: Console) -> None:
    """Each job's ledger and incidents (secrets are taken out before, where the run is made)."""
    # times past what Python's datetime holds (a log may state year 0) shown at its edge, as in the report
    tor: pl.DataFrame = clip_times(analysis.tor)  # type: ignore[attr-defined]
    incidents: pl.DataFrame = clip_times(analysis.incidents)  # type: ignore[attr-defined]
    if tor.height == 0:
        console.print("[yellow]no training progress was found in the inputs: no TOR to compute[/]")
        return
    for job in tor.iter_rows(named=True):
        t_obs = job.get("t_obs_s") or 0.0
        console.rule(f"job {escape(str(job['job']))}")
        console.print(_headline(job, t_obs))
        if not job.get("ended_cleanly", True):
            console.print("[yellow]the job did not end with a clean exit (the logs stop without one)[/]")
        table = Table(title="where the time went")
        table.add_column("bucket")
        table.add_column("time", justify="right")
        table.add_column("share", justify="right")
        for b in BUCKETS:
            secs = job.get(f"{b}_s")
            if secs is None:
                continue
            table.add_row(b, fmt_duration(secs), f"{secs / t_obs:.1%}" if t_obs else "-")
        console.print(table)
        mine = incidents.filter(pl.col("job") == job["job"]) if "job" in incidents.columns else incidents
        if mine.height:
            it = Table(title="incidents")
            for col in ("#", "when (UTC)", "root cause", "planned", "nodes", "downtime", "lost steps", "evidence"):
                it.add_column(col, overflow="fold")
            for i, inc in enumerate(mine.iter_rows(named=True), 1):
                when = inc.get("t_last_progress") or inc.get("t_detected")
                evidence = [_short_evidence(e, job.get("path")) for e in (inc.get("evidence") or [])]
                it.add_row(
                    str(i),
                    when.replace(tzinfo=None).isoformat(" ", "seconds") if when else "-",
                    escape(str(inc.get("root_cause"))),
                    "yes" if inc.get("planned") else "",
                    escape(",".join(inc.get("nodes") or [])) or "-",
                    fmt_duration(inc.get("downtime_s")),
                    "-" if inc.get("lost_steps") is None else str(inc.get("lost_steps")),
                    escape(evidence[0]) if evidence else "-",
                )
            console.print(it)
        else:
            console.print("no incidents")


def _headline(job: dict[str, Any], t_obs: float) -> str:
    """The job's TOR line. A job without a TOR (no step records, or no observed time) says so
    instead of a number; an excerpt's job is often one."""
    if job.get("tor") is None:
        source = job.get("ideal_step_source") or ""
        why = "" if not source or source.startswith("none") else f" ({source})"
        return f"TOR [bold]-[/]  over {fmt_duration(t_obs)} observed: no step time to measure against{why}"
    line = f"TOR [bold]{job['tor']:.4f}[/]  over {fmt_duration(t_obs)} observed"
    ideal = job.get("ideal_step_time_s")
    return f"{line}; ideal step {ideal:.3f}s ({job.get('ideal_step_source', '')})" if ideal else line
