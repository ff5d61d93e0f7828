"""Monte Carlo of the simulator's run model, vectorized across runs.

The model is the one ``toranalyze.simulate`` draws from: a job needs ``work`` hours of training;
it alternates ``tau`` hours of running with a blocking save of ``delta``; every failure class is
a renewal process over up-time (running and saving) with Weibull gaps of a given mean and shape
(one process per class, redrawn when it fires; the others keep their schedule); a failure loses
everything since the last completed save and costs a repair time before running resumes. All
runs advance together failure by failure, so a run costs numpy work per failure, not per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Process:
    name: str
    mean_h: float  # mean up-time between failures of this class for the planned job (hours)
    shape: float = 1.0


@dataclass(frozen=True)
class Repair:
    """Repair time per failure (hours): fixed ``mean_h`` when ``sigma`` is 0, else lognormal."""

    mean_h: float
    sigma: float = 0.0

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.sigma <= 0:
            return np.full(n, self.mean_h)
        mu = math.log(self.mean_h) - self.sigma**2 / 2.0  # keep the mean
        return rng.lognormal(mu, self.sigma, n)


@dataclass(frozen=True)
class Schedule:
    """The planned job: ``work`` hours of training, run ``tau`` hours between blocking saves of
    ``delta`` hours."""

    work: float
    tau: float
    delta: float


def _gaps(rng: np.random.Generator, procs: list[Process], n: int) -> np.ndarray:
    """One fresh gap per (run, class): shape (n, classes)."""
    out = np.full((n, len(procs)), np.inf)
    for j, p in enumerate(procs):
        if math.isfinite(p.mean_h) and p.mean_h > 0:
            out[:, j] = _weibull(rng, p, n)
    return out


def _weibull(rng: np.random.Generator, p: Process, n: int) -> np.ndarray:
    """``n`` Weibull gaps of the process' mean and shape."""
    if 1.0 / p.shape < 170.0:  # gamma(1 + 1/shape) is a finite float
        return p.mean_h / math.gamma(1.0 + 1.0 / p.shape) * rng.weibull(p.shape, n)
    # shapes under ~0.006: in logs, where the scale (underflowing to 0) times a draw (overflowing
    # to inf) would give NaN; numpy's Weibull draw is E ** (1/shape) of the same exponential E
    e = rng.standard_exponential(n)
    with np.errstate(divide="ignore", over="ignore"):
        return np.exp(math.log(p.mean_h) - math.lgamma(1.0 + 1.0 / p.shape) + np.log(e) / p.shape)


MAX_FAILURES = 20_000  # per run; beyond it the ratio has long converged (see simulate_tor)


def simulate_tor(procs: list[Process], repair: Repair, job: Schedule, runs: int, seed: int,
                 max_failures: int = MAX_FAILURES) -> np.ndarray:
    """TOR (ideal time / wall time) of ``runs`` independent runs of ``job``.

    A run still unfinished after ``max_failures`` failures (failures every few minutes on a
    month of work, or an interval too long to ever complete) is scored by the work it had saved
    over the wall time so far: the renewal-reward estimate of the same long-run ratio, which after
    that many failures has converged, and zero when no interval can ever complete. This bounds
    the cost of hopeless plans instead of simulating millions of failures."""
    work, tau, delta = job.work, job.tau, job.delta
    rng = np.random.default_rng(seed)
    saved = np.zeros(runs)
    wall = np.zeros(runs)
    up = np.zeros(runs)
    nxt = _gaps(rng, procs, runs)
    active = np.arange(runs)
    seg = tau + delta
    for _ in range(max_failures):
        if not len(active):
            break
        f = nxt[active].min(axis=1) if procs else np.full(len(active), np.inf)
        gap = f - up[active]
        rem = work - saved[active]
        need = rem + np.ceil(rem / tau - 1e-12) * delta  # time to finish with no failure
        fin = gap >= need
        wall[active[fin]] += need[fin]
        go = active[~fin]
        if not len(go):
            active = go  # every run finished
            break
        g = gap[~fin]
        saved[go] += np.floor(g / seg) * tau
        wall[go] += g + repair.draw(rng, len(go))
        up[go] = f[~fin]
        which = nxt[go].argmin(axis=1)
        nxt[go, which] = up[go] + _gaps(rng, procs, len(go))[np.arange(len(go)), which]
        active = go
    tor = work / np.where(wall > 0, wall, np.inf)
    tor[active] = saved[active] / wall[active]  # unfinished: the ratio so far (see above)
    return tor
