"""A fast truth-level fleet generator: the four fleet tables drawn directly from known rates.

It bypasses logs and their parsing entirely (no log is written, nothing is analyzed): it draws
each job's failures as renewal processes over its running time, exactly as the log simulator's
run model does (one process per class, rate per GPU-, node- or job-hour, Weibull shape keeping
the mean), with planted lemon nodes, and writes the jobs/attempts/incidents/exposure frames of
``toranalyze.fleet.schema``. It exists to score the *statistics* (interval coverage, Weibull
shapes, lemon detection) on hundreds of fleets, which generating and parsing logs could not do
in reasonable time. The log simulator plants bad nodes the same way (``bad_nodes`` in a preset).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import polars as pl

from toranalyze.fleet.schema import EXPOSURE_SCHEMA, FLEET_ATTEMPTS_SCHEMA, FLEET_INCIDENTS_SCHEMA, JOBS_SCHEMA
from toranalyze.model import FailureProcess
from toranalyze.taxonomy import PLANNED

H_US = 3_600_000_000


@dataclass(frozen=True)
class FleetSpec:
    jobs: int = 120
    sizes_nodes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    gpus_per_node: int = 8
    pool: int = 256  # nodes the jobs draw from
    hours: tuple[float, float] = (24.0, 240.0)  # running hours per job (uniform)
    failures: tuple[FailureProcess, ...] = (
        FailureProcess("gpu_hardware", 1.0e-4, "node_hour", 1.0),
        FailureProcess("gpu_memory", 1.6e-4, "node_hour", 1.5),
        FailureProcess("network", 3.0e-6, "gpu_hour", 1.0),
        FailureProcess("storage", 2.0e-6, "node_hour", 1.0),
        FailureProcess("software", 0.02, "job_hour", 0.7),
        FailureProcess("oom_gpu", 0.005, "job_hour", 1.0),
        FailureProcess("hang", 0.001, "job_hour", 1.0),
        FailureProcess("preemption", 0.01, "job_hour", 1.0),
    )
    lemons: int = 3
    lemon_class: str = "gpu_hardware"
    lemon_multiplier: float = 60.0  # the lemon's rate of lemon_class is this many times a node's
    detection_s: tuple[float, float] = (math.log(120.0), 1.0)  # lognormal (mu, sigma) of seconds
    recovery_s: tuple[float, float] = (math.log(900.0), 0.6)
    start: datetime = field(default_factory=lambda: datetime(2024, 6, 1, tzinfo=UTC))


def _renewal(rng: np.random.Generator, mean_h: float, shape: float, horizon: float) -> np.ndarray:
    """Event times (hours of running) of a renewal process with Weibull gaps of mean ``mean_h``."""
    if not math.isfinite(mean_h) or mean_h <= 0:
        return np.empty(0)
    scale = mean_h / math.gamma(1.0 + 1.0 / shape)
    n = int(horizon / mean_h * 1.5) + 10
    t = np.cumsum(scale * rng.weibull(shape, n))
    while t[-1] < horizon:
        t = np.concatenate([t, t[-1] + np.cumsum(scale * rng.weibull(shape, n))])
    return t[t < horizon]


def _job_events(rng: np.random.Generator, spec: FleetSpec, nodes: list[str], hours: float,
                lemon_set: set[str]) -> list[tuple[float, str, str | None]]:
    """(running hour, class, node) of every stop of one job."""
    gpn, n = spec.gpus_per_node, len(nodes)
    ev: list[tuple[float, str, str | None]] = []
    for p in spec.failures:
        mean = 1.0 / p.rate_per_hour(n, gpn) if p.rate > 0 else math.inf
        ts = _renewal(rng, mean, p.shape, hours)
        where = rng.integers(0, n, len(ts))
        ev += [(float(t), p.failure_class, None if p.failure_class in PLANNED else nodes[int(w)])
               for t, w in zip(ts, where, strict=True)]
    lem = next((p for p in spec.failures if p.failure_class == spec.lemon_class), None)
    for node in sorted(lemon_set.intersection(nodes)):
        if lem is None:
            break
        extra = lem.rate_per_hour(1, gpn) * (spec.lemon_multiplier - 1.0)
        ev += [(float(t), lem.failure_class, node) for t in _renewal(rng, 1.0 / extra, 1.0, hours)]
    return sorted(ev, key=lambda e: e[0])


def generate_fleet(spec: FleetSpec, seed: int) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    """The four tables (keys jobs, attempts, incidents, exposure) and the truth (rates in their
    units, effective rates with the lemons' extra failures, shapes, lemon nodes)."""
    rng = np.random.default_rng(seed)
    pool = [f"node-{i:04d}" for i in range(spec.pool)]
    lemons = set(rng.choice(pool, spec.lemons, replace=False).tolist()) if spec.lemons else set()
    rows: dict[str, list[dict[str, Any]]] = {"jobs": [], "attempts": [], "incidents": []}
    lemon_node_hours = 0.0
    for j in range(spec.jobs):
        n = int(rng.choice(spec.sizes_nodes))
        nodes = sorted(rng.choice(pool, n, replace=False).tolist())
        hours = float(rng.uniform(*spec.hours))
        t0 = spec.start + timedelta(hours=float(rng.uniform(0, 24 * 60)))
        events = _job_events(rng, spec, nodes, hours, lemons)
        lemon_node_hours += hours * len(lemons.intersection(nodes))
        _job_rows(rng, spec, DrawnJob(f"job-{j:04d}", nodes, hours, t0, events), rows)
    frames = {
        "jobs": conform(rows["jobs"], JOBS_SCHEMA),
        "attempts": conform(rows["attempts"], FLEET_ATTEMPTS_SCHEMA),
        "incidents": conform(rows["incidents"], FLEET_INCIDENTS_SCHEMA),
    }
    frames["exposure"] = _exposure(frames["attempts"], spec.gpus_per_node)
    return frames, _truth(spec, frames["exposure"], lemons, lemon_node_hours)


def _truth(spec: FleetSpec, exposure: pl.DataFrame, lemons: set[str], lemon_node_hours: float) -> dict[str, Any]:
    node_hours = float(exposure["node_hours"].sum())
    classes = {}
    for p in spec.failures:
        eff = p.rate
        if p.failure_class == spec.lemon_class and node_hours > 0:
            eff = p.rate * (1.0 + (spec.lemon_multiplier - 1.0) * lemon_node_hours / node_hours)
        classes[p.failure_class] = {"rate": p.rate, "per": p.per, "shape": p.shape, "rate_effective": eff,
                                    "planned": p.failure_class in PLANNED}
    return {"classes": classes, "lemons": sorted(lemons), "lemon_multiplier": spec.lemon_multiplier,
            "lemon_class": spec.lemon_class, "gpus_per_node": spec.gpus_per_node}


def _exposure(attempts: pl.DataFrame, gpn: int) -> pl.DataFrame:
    """One exposure row per node of every attempt (running time from its start to its end)."""
    hours = (pl.col("t_end") - pl.col("t_start")).dt.total_microseconds() / H_US
    return attempts.explode("node_list").select(
        "run", "job", "attempt", pl.col("node_list").alias("node"), "t_start", "t_end", hours.alias("hours"),
        pl.lit(gpn, pl.Int32).alias("gpus"), pl.lit(1, pl.Int32).alias("nodes"),
        (hours * gpn).alias("gpu_hours"), hours.alias("node_hours"), pl.col("gpus").alias("job_gpus"),
    ).cast(dict(EXPOSURE_SCHEMA))  # type: ignore[arg-type]


def conform(rows: list[dict[str, Any]], schema: pl.Schema) -> pl.DataFrame:
    if not rows:
        return pl.DataFrame(schema=schema)
    df = pl.DataFrame(rows, infer_schema_length=None)
    return df.select([pl.col(c).cast(t) if c in df.columns else pl.lit(None, t).alias(c) for c, t in schema.items()])


@dataclass(frozen=True)
class DrawnJob:
    """One job of the fleet as drawn: its name, nodes, running hours, start and stops
    ((running hour, class, node) in order)."""

    name: str
    nodes: list[str]
    hours: float
    t0: datetime
    stops: list[tuple[float, str, str | None]]


def _job_rows(rng: np.random.Generator, spec: FleetSpec, drawn: DrawnJob,
              rows: dict[str, list[dict[str, Any]]]) -> None:
    """Attempts between stops: each runs from its start to the next stop's onset; the stop is
    detected after a lognormal delay and the next attempt starts after a lognormal recovery."""
    job, nodes, hours, t0, events = drawn.name, drawn.nodes, drawn.hours, drawn.t0, drawn.stops
    g = len(nodes) * spec.gpus_per_node
    t, u = t0, 0.0
    bounds = [*events, (hours, "", None)]
    n_unexp = 0
    for a, (at, cls, node) in enumerate(bounds):
        run_h = at - u
        t_end = t + timedelta(hours=run_h)
        rows["attempts"].append({"run": "fleet", "job": job, "attempt": a, "t_start": t, "t_end": t_end,
                                 "t_first_step_start": t, "gpus": g, "node_list": nodes,
                                 "state": "FAILED" if cls else "COMPLETED"})
        if not cls:
            break
        det = timedelta(seconds=float(rng.lognormal(*spec.detection_s)))
        rec = timedelta(seconds=float(rng.lognormal(*spec.recovery_s)))
        planned = cls in PLANNED
        n_unexp += not planned
        rows["incidents"].append({
            "run": "fleet", "job": job, "incident": a, "attempt": a, "root_cause": cls, "planned": planned,
            "nodes": [node] if node else [], "t_last_progress": t_end, "t_first_error": t_end,
            "t_detected": t_end + det, "t_restart": t_end + det + rec, "t_resumed": t_end + det + rec,
            "downtime_s": (det + rec).total_seconds(),
        })
        t, u = t_end + det + rec, at
    rows["jobs"].append({"run": "fleet", "job": job, "gpus": g, "nodes": len(nodes), "t_start": t0, "t_end": t_end,
                         "span_s": (t_end - t0).total_seconds(), "n_attempts": len(bounds),
                         "n_incidents": len(events), "n_unexpected": n_unexp, "n_planned": len(events) - n_unexp})
