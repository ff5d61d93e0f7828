"""``plan``: predicted TOR of a future run and its best checkpoint interval, from rates.json.

Every unexpected class of the rates document becomes one failure process of the planned job at
its best exposure (rate x GPUs, x nodes or x 1 per hour of running); its Weibull shape is used
when the document rejects a constant rate for it, else 1. Planned stops are left out (they are
not failures). The repair time is ``--restart`` when given, else the mean observed downtime
(detection + recovery) with the spread of its lognormal fit. Times are hours inside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from toranalyze.fleet.fit import exposure_multiplier, mtbf_table
from toranalyze.model import daly_interval, tor_fail_stop_exact, tor_first_order, young_interval
from toranalyze.plan.montecarlo import Process, Repair, Schedule, simulate_tor

DEFAULT_REPAIR_H = 10.0 / 60.0  # when neither --restart nor observed downtime is available


@dataclass(frozen=True)
class PlanOptions:
    gpus: int
    ckpt_interval_h: float | None = None  # None: Daly's interval
    ckpt_save_h: float = 5.0 / 60.0
    restart_h: float | None = None  # None: the observed downtime
    ideal_days: float = 30.0
    runs: int = 400
    seed: int = 0


NO_FAILURE_INTERVAL_H = 24.0  # the checkpoint interval assumed when no failure gives Young or Daly one


def processes(rates: dict[str, Any], gpus: int) -> list[Process]:
    gpn = float(rates.get("gpus_per_node") or 8.0)
    out = []
    for name, c in sorted(rates["classes"].items()):
        unit = c["best_exposure"]
        r = c["rates"][unit]["rate"] or 0.0
        lam = r * exposure_multiplier(unit, gpus, gpn)
        wb = c.get("weibull") or {}
        shape = float(wb["shape"]) if wb.get("constant_rate_rejected") else 1.0
        if lam > 0:
            out.append(Process(name, 1.0 / lam, shape))
    return out


def repair(rates: dict[str, Any], opts: PlanOptions) -> tuple[Repair, str]:
    if opts.restart_h is not None:
        return Repair(opts.restart_h), "--restart"
    d = (rates.get("downtime") or {}).get("downtime")
    if d and d.get("mean_s"):
        sigma = (d.get("lognormal") or {}).get("sigma") or 0.0
        return Repair(d["mean_s"] / 3600.0, float(sigma)), "observed downtime (detection + recovery)"
    return Repair(DEFAULT_REPAIR_H), "default 10 min (no downtime in the rates file)"


def mtbf(rates: dict[str, Any], gpus: int) -> dict[str, float | None]:
    """Mean up-time between failures of the planned job with its interval (hours)."""
    gpn = float(rates.get("gpus_per_node") or 8.0)
    if not rates["classes"]:  # no failure seen: only the rate's upper bound says something
        hi = rates["unexpected"]["rates"]["node_hour"]["hi"]
        return {"mtbf_h": None, "lo_h": 1.0 / (hi * gpus / gpn) if hi else None, "hi_h": None}
    row = mtbf_table(rates["classes"], [gpus], gpn)[0]
    return {"mtbf_h": row["mtbf_hours"], "lo_h": row["lo"], "hi_h": row["hi"]}


THIN_RUNNING_H = 1.0  # node-hours of running time under which the rates are too thin to plan with
FEW_FAILURES = 5  # unexpected failures under which the rates' bounds are wide


def cautions(rates: dict[str, Any], mtbf_h: float | None, opts: PlanOptions) -> list[str]:
    """What a planner should know before trusting the numbers: rates resting on little running
    time or few failures (a pasted excerpt makes a rates file too), and failures that come faster
    than a checkpoint is saved."""
    out = []
    ex = rates.get("exposure") or {}
    running_h = max(float(ex.get("node_hours") or 0.0), float(ex.get("job_hours") or 0.0))
    if running_h < THIN_RUNNING_H:
        secs = running_h * 3600
        span = f"{secs:.3g} s" if secs < 600 else f"{secs / 60:.0f} min"
        out.append(f"the rates rest on {span} of running time: too little to plan with "
                   "(analyse whole runs, or a fleet of them with `toranalyze fleet`)")
    n = int((rates.get("unexpected") or {}).get("failures") or 0)
    if 0 < n < FEW_FAILURES:
        out.append(f"the rates rest on {n} unexpected failure{'s' if n > 1 else ''}: read the 95% bounds, "
                   "not the point estimate")
    if mtbf_h is not None and mtbf_h <= opts.ckpt_save_h:
        out.append("the job would fail more often than it can save a checkpoint: no interval makes progress")
    return out


def _cf(M: float | None, tau: float, delta: float, R: float) -> float:
    return tor_fail_stop_exact(M if M else math.inf, tau, delta, R)


def _mc(procs: list[Process], rep: Repair, tau: float, opts: PlanOptions, runs: int | None = None) -> np.ndarray:
    job = Schedule(work=opts.ideal_days * 24.0, tau=tau, delta=opts.ckpt_save_h)
    return simulate_tor(procs, rep, job, runs or opts.runs, opts.seed)


def _ci(x: np.ndarray) -> dict[str, float]:
    m, se = float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0
    return {"tor": m, "lo": m - 1.96 * se, "hi": m + 1.96 * se, "se": se}


def interval_grid(around: float) -> np.ndarray:
    """25 intervals from ``around``/4 to 4 x ``around`` on a log scale, rounded to the nanohour,
    except intervals that small (failures every few microseconds: a rates file written from an
    excerpt), which rounding would make 0."""
    scaled = around * np.geomspace(0.25, 4.0, 25)
    rounded = np.round(scaled, 9)
    return np.unique(np.where(rounded > 0, rounded, scaled))


def optimum(procs: list[Process], rep: Repair, opts: PlanOptions, around: float) -> dict[str, Any]:
    """The interval with the best simulated TOR on a log grid around ``around`` (common random
    numbers: every interval sees the same failures), and its gain over ``around`` with a paired
    95% interval."""
    grid = interval_grid(around)
    base = _mc(procs, rep, around, opts)
    sims = [_mc(procs, rep, float(t), opts) for t in grid]
    k = int(np.argmax([s.mean() for s in sims]))
    diff = sims[k] - base
    se = float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else 0.0
    return {"tau_h": float(grid[k]), **_ci(sims[k]),
            "gain_over_daly": {"tor": float(diff.mean()), "lo": float(diff.mean() - 1.96 * se),
                               "hi": float(diff.mean() + 1.96 * se)}}


def why_differ(cf: float, mc: dict[str, float], procs: list[Process], rep: Repair, tau: float,
               opts: PlanOptions) -> list[str]:
    """Why the exact closed form and the Monte Carlo disagree, when they do."""
    diff = mc["tor"] - cf
    if abs(diff) <= max(2.0 * mc["se"], 0.002):
        return ["they agree: failures are exponential and the closed form's assumptions hold"]
    out = []
    odd = [f"{p.name} (shape {p.shape:.2f})" for p in procs if abs(p.shape - 1.0) > 1e-9]
    if odd:
        out.append("Weibull shape != 1 for " + ", ".join(odd) + ": failures are not a Poisson process, so the "
                   "closed form (exponential) misjudges how often work is lost; the simulation is the reference")
    out.append("a finite run of " + f"{opts.ideal_days:g} ideal days ends mid-interval and starts with fresh "
               "failure clocks; the closed form is the long-run ratio")
    if rep.sigma > 0:
        out.append("the repair time varies (lognormal); with failures only during up-time TOR depends on its "
                   "mean alone, so its spread widens the runs' spread but does not move the mean")
    return out


def plan(rates: dict[str, Any], opts: PlanOptions) -> dict[str, Any]:
    """The full plan: inputs used, predicted TOR both ways, best intervals, what-if table."""
    procs = processes(rates, opts.gpus)
    rep, rep_src = repair(rates, opts)
    mt = mtbf(rates, opts.gpus)
    M = mt["mtbf_h"]
    d = opts.ckpt_save_h
    young = young_interval(d, M) if M else None
    daly = daly_interval(d, M) if M else None
    tau = opts.ckpt_interval_h or daly or NO_FAILURE_INTERVAL_H
    cf = _cf(M, tau, d, rep.mean_h)
    cf_lo = _cf(mt["lo_h"], tau, d, rep.mean_h) if mt["lo_h"] else None
    cf_hi = _cf(mt["hi_h"], tau, d, rep.mean_h) if mt["hi_h"] else None
    mc = _ci(_mc(procs, rep, tau, opts))
    best = optimum(procs, rep, opts, daly or tau)
    return {
        "cautions": cautions(rates, M, opts),
        "inputs": {"gpus": opts.gpus, "ckpt_interval_h": tau, "ckpt_save_h": d, "repair_h": rep.mean_h,
                   "repair_sigma": rep.sigma, "repair_source": rep_src, "ideal_days": opts.ideal_days,
                   "runs": opts.runs, "seed": opts.seed, "mtbf_h": M, "mtbf_lo_h": mt["lo_h"], "mtbf_hi_h": mt["hi_h"],
                   "classes": [{"class": p.name, "mean_h": p.mean_h, "shape": p.shape} for p in procs]},
        "closed_form": {"tor": cf, "lo": cf_lo, "hi": cf_hi,
                        "first_order": tor_first_order(M, tau, d, rep.mean_h) if M else None,
                        "formula": "q = exp(-(tau+delta)/M), TOR = tau*q / ((1-q)*(M+R))"},
        "monte_carlo": mc,
        "why_differ": why_differ(cf, mc, procs, rep, tau, opts),
        "intervals": {"young_h": young, "daly_h": daly, "optimum": best},
        "what_if": what_if(rates, opts, procs_for=lambda g: processes(rates, g), rep=rep),
    }


def what_if(rates: dict[str, Any], opts: PlanOptions, procs_for: Any, rep: Repair) -> list[dict[str, Any]]:
    """TOR over job sizes (x1/4 .. x4) and intervals (Young, Daly, the given one), both ways."""
    rows = []
    sizes = sorted({max(1, int(opts.gpus * f)) for f in (0.25, 0.5, 1.0, 2.0, 4.0)})
    small = replace(opts, runs=max(50, opts.runs // 4))
    for g in sizes:
        M = mtbf(rates, g)["mtbf_h"]
        taus = {"young": young_interval(opts.ckpt_save_h, M) if M else None,
                "daly": daly_interval(opts.ckpt_save_h, M) if M else None}
        if opts.ckpt_interval_h:
            taus["given"] = opts.ckpt_interval_h
        elif not M:  # no failure seen: the interval the plan itself uses
            taus["default"] = NO_FAILURE_INTERVAL_H
        for name, tau in taus.items():
            if not tau:
                continue
            mc = _ci(_mc(procs_for(g), rep, tau, small))
            rows.append({"gpus": g, "interval": name, "tau_h": tau, "mtbf_h": M,
                         "tor_closed_form": _cf(M, tau, opts.ckpt_save_h, rep.mean_h),
                         "tor_monte_carlo": mc["tor"], "mc_lo": mc["lo"], "mc_hi": mc["hi"]})
    return rows
