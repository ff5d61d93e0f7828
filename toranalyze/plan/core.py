"""``plan``: a future run's TOR, its best checkpoint interval and strategy, from fitted rates.

Every unexpected failure class becomes one failure process of the planned job, scaled per GPU,
per node or per job (``inputs.py``). A checkpoint strategy (``strategy.py``) and the recovery
phases give the exact long-run TOR under Poisson failures (``renewal.py``, failures during
recovery included), and a Monte Carlo of the same run (``montecarlo.py``) checks it and covers
what the closed form cannot (Weibull gaps, a finite run, spread of recovery times). Fail-slow
periods multiply the result as throughput kept. Times are hours inside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from toranalyze.errors import RatesError
from toranalyze.plan import inputs
from toranalyze.plan.inputs import ClassRate
from toranalyze.plan.montecarlo import Config
from toranalyze.plan.renewal import Cycle, cycle
from toranalyze.plan.renewal import tor as renewal_tor
from toranalyze.plan.strategy import Recovery, Strategy, named

MAX_GPUS = 10_000_000
SIZE_WARN = 4.0  # planned job larger than the largest observed by this factor: say it extrapolates
EXPOSURE_WARN = 10.0  # planned GPU-hours over observed GPU-hours beyond which the plan says so
THIN_RUNNING_H = 1.0  # node-hours of running time under which the rates are too thin to plan with
FEW_FAILURES = 5
DEFAULT_GPUS_PER_NODE = 8.0  # with declared rates alone and no --gpus-per-node
NO_FAILURE_INTERVAL_H = 24.0  # the interval used when no failure rate gives a best one


@dataclass(frozen=True)
class PlanOptions:
    gpus: int
    ideal_days: float = 30.0
    strategy: str = "blocking"
    ckpt_interval_h: float | None = None  # None: the best interval of the closed form
    ckpt_save_h: float = 5.0 / 60.0  # blocking durable save (the background persist of async/memory)
    snapshot_h: float = 10.0 / 3600.0  # blocking part of an asynchronous save
    mem_save_h: float = 5.0 / 3600.0  # blocking in-memory / peer save
    mem_load_h: float = 1.0 / 60.0  # restore from memory / peer
    every: int = 10  # a durable save every n in-memory ones
    survival: float = 0.9  # share of failures after which the in-memory copy is usable
    load_h: float = 0.0  # durable load beyond the start-up (the observed start-up includes it)
    recovery: dict[str, float | None] = field(default_factory=dict)  # detect, queue, startup, restart
    queue_first_h: float = 0.0
    slow: tuple[tuple[float, float], ...] = ()
    rates: tuple[ClassRate, ...] = ()  # declared rates: replace fitted classes of the same name
    gpus_per_node: float | None = None
    runs: int = 400
    seed: int = 0
    compare: bool = False


@dataclass(frozen=True)
class Job:
    """Everything about the planned job that does not depend on its size or interval."""

    classes: list[ClassRate]
    gpn: float
    recovery: Recovery
    rho: float  # throughput kept despite fail-slow periods
    opts: PlanOptions

    def rate(self, gpus: float) -> float:
        return sum(c.per_hour(gpus, self.gpn) for c in self.classes)

    def strategy(self, name: str | None = None) -> Strategy:
        o = self.opts
        return named(name or o.strategy, o.ckpt_save_h, {
            "snapshot_h": o.snapshot_h, "persist_h": o.ckpt_save_h, "mem_save_h": o.mem_save_h,
            "mem_load_h": o.mem_load_h, "every": o.every, "survival": o.survival, "load_h": o.load_h})

    def config(self, s: Strategy, tau: float, gpus: float) -> Config:
        means = tuple(1.0 / r if (r := c.per_hour(gpus, self.gpn)) > 0 else math.inf for c in self.classes)
        return Config(s, tau, self.opts.ideal_days * 24.0 / self.rho, self.recovery, means)

    @property
    def shapes(self) -> tuple[float, ...]:
        return tuple(c.shape for c in self.classes)


def job(doc: dict[str, Any], opts: PlanOptions) -> tuple[Job, dict[str, Any]]:
    gpn = float(opts.gpus_per_node or (doc.get("gpus_per_node") if doc else DEFAULT_GPUS_PER_NODE) or 0.0)
    if gpn <= 0 or gpn > 1024:
        raise RatesError(f"{doc.get('gpus_per_node')!r} GPUs per node", field="$.gpus_per_node",
                         hint="give --gpus-per-node (1 to 1024)")
    named_rates = {c.name: c for c in opts.rates}
    classes = [named_rates.pop(c.name, c) for c in (inputs.fitted_classes(doc) if doc else [])]
    classes += sorted(named_rates.values(), key=lambda c: c.name)
    rec, rec_src = inputs.recovery(doc, opts.recovery)
    rho, rho_src = inputs.slowness(doc, list(opts.slow))
    if rho <= 0:
        raise RatesError("all running time is lost to slowness: the run would never finish",
                         field="$.fail_slow.loss_fraction" if not opts.slow else "--slow")
    return Job(classes, gpn, rec, rho, opts), {"recovery": rec_src, "fail_slow": rho_src}


HOPELESS_TOR = 1e-6  # below it the run does not finish in any time worth printing


def solved(j: Job, s: Strategy, tau: float, gpus: float) -> Cycle | None:
    """The closed form's cycle, or None when the run would practically never finish."""
    try:
        c = cycle(s, tau, j.rate(gpus), j.recovery)
    except (ArithmeticError, np.linalg.LinAlgError):
        return None
    return c if math.isfinite(c.tor) and c.tor > HOPELESS_TOR else None


def tor_at(j: Job, s: Strategy, tau: float, gpus: float, rate: float | None = None) -> float:
    """Closed-form TOR (fail-slow included) at the job's rate, or at ``rate`` per running hour."""
    lam = j.rate(gpus) if rate is None else rate
    return j.rho * renewal_tor(s, tau, lam, j.recovery)


def best_interval(j: Job, s: Strategy, gpus: float) -> float | None:
    """The interval that maximises the closed-form TOR (a bounded search on a log scale); None
    when no interval lets the run progress (the TOR is flat at 0)."""
    lam = j.rate(gpus)
    if lam <= 0:
        return NO_FAILURE_INTERVAL_H
    guess = math.sqrt(2 * max(s.durable.save_h, s.memory.save_h if s.memory else 0.0, 1e-6) / lam)
    lo, hi = math.log(max(guess / 1e3, 1e-7)), math.log(min(guess * 1e3, 1e5))
    if not hi > lo:  # failures every fraction of a second: nothing to search
        return None
    r = minimize_scalar(lambda x: -renewal_tor(s, math.exp(x), lam, j.recovery), bounds=(lo, hi),
                        method="bounded", options={"xatol": 1e-5})
    return float(math.exp(r.x)) if -r.fun > HOPELESS_TOR else None


def interval(j: Job, s: Strategy, gpus: float) -> tuple[float, str]:
    """The interval a plan uses and why: the given one, else the best, else (no interval makes
    progress) Young's, so that the hopeless plan still shows its numbers."""
    if j.opts.ckpt_interval_h:
        return j.opts.ckpt_interval_h, "given"
    best = best_interval(j, s, gpus)
    if best is not None:
        return best, "best of the closed form"
    lam = j.rate(gpus)
    delta = max(s.durable.save_h, s.memory.save_h if s.memory else 0.0, 1e-6)
    return (math.sqrt(2 * delta / lam) if lam > 0 else NO_FAILURE_INTERVAL_H), "none makes progress; Young's"


def sizes_around(gpus: int) -> list[int]:
    return sorted({max(1, int(gpus * f)) for f in (0.25, 0.5, 1.0, 2.0, 4.0)})


def check_options(o: PlanOptions) -> None:
    """Values no plan can mean: refused with the option's name (exit 2 at the command line)."""
    bad = [("--gpus", o.gpus, 1, MAX_GPUS), ("--ideal-days", o.ideal_days, 1e-6, 36500),
           ("--ckpt-interval", o.ckpt_interval_h or 1.0, 1e-7, 8766), ("--ckpt-save", o.ckpt_save_h, 0, 8766),
           ("--snapshot", o.snapshot_h, 0, 8766), ("--mem-save", o.mem_save_h, 0, 8766),
           ("--mem-load", o.mem_load_h, 0, 8766), ("--every", o.every, 1, 100_000), ("--survival", o.survival, 0, 1),
           ("--queue-first", o.queue_first_h, 0, 87660), ("--runs", o.runs, 2, 100_000)]
    bad += [(f"--{k}", v, 0, 8766) for k, v in o.recovery.items() if v is not None]
    for name, v, lo, hi in bad:
        if not (isinstance(v, (int, float)) and math.isfinite(v) and lo <= v <= hi):
            raise ValueError(f"{name}: {v!r} is out of range ({lo:g} to {hi:g})")

