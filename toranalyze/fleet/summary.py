"""The numbers ``toranalyze fleet`` prints, computed from the merged tables (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from toranalyze.taxonomy import PLANNED

TOR_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


@dataclass
class FleetSummary:
    runs: int
    jobs: int
    attempts: int
    gpu_hours: float  # running (exposure) GPU-hours
    node_hours: float
    wall_gpu_hours: float  # observed span x GPUs (running, down and queued)
    lost_gpu_hours: float
    by_class: pl.DataFrame  # root_cause, unexpected, planned
    tor_quantiles: dict[float, float]
    tor_mean: float | None


def summarize(runs: int, jobs: pl.DataFrame, attempts: pl.DataFrame, incidents: pl.DataFrame,
              exposure: pl.DataFrame) -> FleetSummary:
    planned = pl.col("root_cause").is_in(sorted(PLANNED))
    by_class = (
        incidents.group_by("root_cause")
        .agg((~planned).sum().alias("unexpected"), planned.sum().alias("planned"))
        .sort(["planned", "unexpected", "root_cause"], descending=[False, True, False])
    )
    tor = jobs["tor"].drop_nulls()
    quantiles = {q: float(tor.quantile(q, "linear") or 0.0) for q in TOR_QUANTILES} if tor.len() else {}
    return FleetSummary(
        runs=runs,
        jobs=jobs.height,
        attempts=attempts.height,
        gpu_hours=float(exposure["gpu_hours"].sum() or 0.0),
        node_hours=float(exposure["node_hours"].sum() or 0.0),
        wall_gpu_hours=float((jobs["span_s"] * jobs["gpus"]).sum() or 0.0) / 3600.0,
        lost_gpu_hours=float(jobs["lost_gpu_hours"].sum() or 0.0),
        by_class=by_class,
        tor_quantiles=quantiles,
        tor_mean=float(tor.mean()) if tor.len() else None,  # type: ignore[arg-type]
    )


_NUMBERS = ("runs", "jobs", "attempts", "gpu_hours", "node_hours", "wall_gpu_hours", "lost_gpu_hours", "tor_mean")


def summary_record(s: FleetSummary) -> dict[str, Any]:
    """The summary as JSON-ready data (kept with the products it was printed with)."""
    return {**{k: getattr(s, k) for k in _NUMBERS}, "by_class": s.by_class.rows(),
            "tor_quantiles": [[q, v] for q, v in s.tor_quantiles.items()]}


def summary_from(d: dict[str, Any]) -> FleetSummary:
    by_class = pl.DataFrame(d["by_class"], schema={"root_cause": pl.String, "unexpected": pl.UInt32,
                                                   "planned": pl.UInt32}, orient="row")
    return FleetSummary(**{k: d[k] for k in _NUMBERS}, by_class=by_class,
                        tor_quantiles={float(q): float(v) for q, v in d["tor_quantiles"]})
