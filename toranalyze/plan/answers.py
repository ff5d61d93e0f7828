"""What a plan tells from the closed form: the MTBF both ways with exact intervals, the run's
probability of meeting a failure, its expected failures, where each failure's time goes, the
GPU-hours, how far the rates are extrapolated, and what to be careful about."""

from __future__ import annotations

import math
from typing import Any

from toranalyze.model import daly_interval, young_interval
from toranalyze.plan import inputs
from toranalyze.plan.core import EXPOSURE_WARN, FEW_FAILURES, SIZE_WARN, THIN_RUNNING_H, Job, solved, tor_at
from toranalyze.plan.renewal import Cycle
from toranalyze.plan.strategy import Strategy

FORMULA = ("exact long-run ratio of a Markov renewal model (Poisson failures over up-time, failures "
           "during restarts included); one blocking tier: TOR = tau / ((M + D) e^(R/M) (e^((tau+delta)/M) - 1))")


def summary(j: Job, s: Strategy, tau: float, doc: dict[str, Any], sources: dict[str, Any]) -> dict[str, Any]:
    g = j.opts.gpus
    lam = j.rate(g)
    cyc = solved(j, s, tau, g)
    iv = inputs.rate_interval(j.classes, g, j.gpn)
    bound = inputs.zero_failure_bound(doc, g, j.gpn) if iv is None and lam == 0 else None
    cf = tor_at(j, s, tau, g)
    lo = tor_at(j, s, tau, g, iv[2]) if iv else (tor_at(j, s, tau, g, bound) if bound else None)
    hi = tor_at(j, s, tau, g, iv[1]) if iv else (cf if bound else None)
    ex = extrapolation(j, doc)
    return {
        "cautions": cautions(j, s, doc, ex, bound),
        "inputs": _inputs(j, s, tau, sources),
        "mtbf": _mtbf(lam, iv, bound, cyc),
        "extrapolation": ex,
        "closed_form": {"tor": cf, "lo": lo, "hi": hi, "tor_fail_stop": cf / j.rho if j.rho > 0 else 0.0,
                        "formula": FORMULA},
        "run": run_answers(j, s, tau, cyc),
        "intervals": _intervals(s, lam, tau, j),
    }


def _inputs(j: Job, s: Strategy, tau: float, sources: dict[str, Any]) -> dict[str, Any]:
    rec = j.recovery
    return {
        "gpus": j.opts.gpus, "gpus_per_node": j.gpn, "ideal_days": j.opts.ideal_days,
        "strategy": {"name": s.name, "describe": s.describe(), "interval_h": tau,
                     "interval_source": sources["interval"]},
        "recovery": {"detect_h": rec.detect.mean_h, "queue_h": rec.queue.mean_h, "startup_h": rec.startup.mean_h,
                     "startup_sigma": rec.startup.sigma, "queue_first_h": j.opts.queue_first_h,
                     "sources": sources["recovery"]},
        "fail_slow": {"throughput_kept": j.rho, "source": sources["fail_slow"]},
        "runs": j.opts.runs, "seed": j.opts.seed,
        "classes": [{"class": c.name, "per": c.per, "scaling_source": c.source, "evidence": c.evidence,
                     "failures": c.failures, "exposure": c.exposure, "rate_per_unit_hour": c.rate,
                     "published": inputs.published(c), "shape": c.shape,
                     "job_rate_per_hour": c.per_hour(j.opts.gpus, j.gpn)} for c in j.classes],
    }


def _mtbf(lam: float, iv: tuple[float, float, float] | None, bound: float | None,
          cyc: Cycle | None) -> dict[str, Any]:
    """Mean time between failures over running time (up-time), with its exact interval, and over
    wall time (down time between failures included)."""
    wall = cyc.time_h / cyc.failures if cyc and cyc.failures > 0 else None
    if iv:
        return {"running_h": 1.0 / lam, "lo_h": 1.0 / iv[2], "hi_h": 1.0 / iv[1] if iv[1] > 0 else None,
                "wall_h": wall, "interval": "exact Poisson (Garwood) of the failure count"}
    if bound:
        return {"running_h": None, "lo_h": 1.0 / bound, "hi_h": None, "wall_h": None,
                "interval": "no failure seen: rule of three (95% one-sided)"}
    return {"running_h": 1.0 / lam if lam > 0 else None, "lo_h": None, "hi_h": None, "wall_h": wall,
            "interval": "declared rates carry no interval" if lam > 0 else "no failure rate"}


def _intervals(s: Strategy, lam: float, tau: float, j: Job) -> dict[str, Any]:
    delta = s.durable.save_h if s.memory is None else s.memory.save_h
    M = 1.0 / lam if lam > 0 else None
    return {"young_h": young_interval(delta, M) if M and delta > 0 else None,
            "daly_h": daly_interval(delta, M) if M and delta > 0 else None, "used_h": tau,
            "blocking_h": delta}


def run_answers(j: Job, s: Strategy, tau: float, cyc: Cycle | None) -> dict[str, Any]:
    """The planned run as a whole: probability of meeting a failure, failures, wall and calendar
    time, time per failure by phase, GPU-hours, and fail-stop against fail-slow loss."""
    g, work = j.opts.gpus, j.opts.ideal_days * 24.0
    run_h = max(tau, s.max_persist())
    saves = sum(s.tier(i).save_h for i in range(1, s.k + 1))
    healthy = work / j.rho * (s.k * run_h + saves) / (s.k * tau)  # the run's time with no failure
    out: dict[str, Any] = {"p_any_failure": p_failure(j, healthy), "failure_free_h": healthy}
    if cyc is None:  # the run would practically never finish
        return {**out, "expected_failures": None, "wall_days": None, "calendar_days": None,
                "lost_per_failure_h": {"closed_form": None}, "gpu_hours": None, "loss": None}
    cycles = work / j.rho / cyc.work_h
    wall = cycles * cyc.time_h
    per = ({"detection": j.recovery.detect.mean_h, "queue": j.recovery.queue.mean_h,
            "restart": cyc.restart_h / cyc.failures, "rollback": cyc.rollback_h / cyc.failures}
           if cyc.failures > 0 else None)
    tor_fs = cyc.tor
    return {**out, "expected_failures": cycles * cyc.failures, "wall_days": wall / 24.0,
            "calendar_days": (wall + j.opts.queue_first_h) / 24.0,
            "lost_per_failure_h": {"closed_form": per},
            "gpu_hours": {"useful": g * work, "run": g * wall, "saves": g * cycles * cyc.saves_h,
                          "failures": g * cycles * (cyc.time_h - cyc.work_h - cyc.saves_h),
                          "fail_slow": g * (work / j.rho - work)},
            "loss": {"fail_stop": 1.0 - tor_fs, "fail_slow": tor_fs * (1.0 - j.rho)}}


def p_failure(j: Job, hours: float) -> float:
    """Probability that a run of ``hours`` of up-time meets at least one failure (each class's
    first failure is Weibull from the start, so this is exact for any shape)."""
    h = 0.0
    for c in j.classes:
        lam = c.per_hour(j.opts.gpus, j.gpn)
        if lam > 0:
            scale = 1.0 / lam / math.gamma(1.0 + 1.0 / c.shape) if 1.0 / c.shape < 170 else 0.0
            h += (hours / scale) ** c.shape if scale > 0 else math.inf
    return -math.expm1(-h)


def extrapolation(j: Job, doc: dict[str, Any]) -> dict[str, Any]:
    """How far the plan reaches beyond what the rates were measured on."""
    observed = [r["gpus_bucket"] for r in (doc.get("mtbf_vs_job_size") or {}).get("observed", [])
                if (r.get("job_hours") or 0) > 0]
    largest = max(observed) if observed else None
    seen = float((doc.get("exposure") or {}).get("gpu_hours") or 0.0)
    planned = j.opts.gpus * j.opts.ideal_days * 24.0
    return {"largest_observed_gpus": largest, "size_factor": j.opts.gpus / largest if largest else None,
            "observed_gpu_hours": seen, "planned_gpu_hours": planned,
            "exposure_factor": planned / seen if seen > 0 else None}


def cautions(j: Job, s: Strategy, doc: dict[str, Any], ex: dict[str, Any], bound: float | None) -> list[str]:
    """What a planner should know before trusting the numbers."""
    out = []
    e = doc.get("exposure") or {}
    running = max(float(e.get("node_hours") or 0.0), float(e.get("job_hours") or 0.0))
    fitted = [c for c in j.classes if c.failures is not None]
    if doc and running < THIN_RUNNING_H:
        out.append(f"the rates rest on {running * 3600:.3g} s of running time: too little to plan with "
                   "(analyse whole runs, or a fleet of them with `toranalyze fleet`)")
    n = sum(c.failures or 0 for c in fitted)
    if 0 < n < FEW_FAILURES:
        out.append(f"the rates rest on {n} failure{'s' if n > 1 else ''}: read the 95% bounds, "
                   "not the point estimate")
    if bound:
        out.append(f"no failure was seen in {float(e.get('node_hours') or 0):.4g} node-hours: the failure rate is "
                   "at most 3 per that exposure (95%, rule of three), so the TOR range is from that bound "
                   "to no failure")
    out += _extrapolation_cautions(j, ex)
    lam = j.rate(j.opts.gpus)
    if lam > 0 and 1.0 / lam <= max(s.durable.save_h, s.memory.save_h if s.memory else 0.0):
        out.append("the job would fail more often than it can save a checkpoint: no interval makes progress")
    return out


def _extrapolation_cautions(j: Job, ex: dict[str, Any]) -> list[str]:
    size, expo = ex["size_factor"], ex["exposure_factor"]
    if not ((size and size > SIZE_WARN) or (expo and expo > EXPOSURE_WARN)):
        return []
    per_job = [c.name for c in j.classes if c.per == "job"]
    scaled = [c.name for c in j.classes if c.per != "job"]
    text = "extrapolated: the plan is " + " and ".join(
        x for x in (f"{size:.3g}x the largest job observed ({ex['largest_observed_gpus']} GPUs)" if size else "",
                    f"{expo:.3g}x the observed GPU-hours" if expo else "") if x)
    if scaled:
        text += "; scaled with size: " + ", ".join(scaled)
    if per_job:
        text += "; per job, not scaled: " + ", ".join(per_job)
    return [text]
