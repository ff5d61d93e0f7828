"""Monte Carlo of planned runs, many configurations at once, vectorized across runs.

Every lane is one run of one configuration (a strategy, an interval, a job size). Failure classes
are renewal processes over up-time with Weibull gaps (one clock per class, redrawn when it fires).
All lanes advance together failure by failure: a step draws the restart the lane needs (none at
the start), lets a failure strike it or lets training run until the next failure, counts the
saves completed meanwhile (an asynchronous save only once its persist is done), and sends the
lane to its next restart (from memory when the copy survived, else from storage). The work runs
at the interval's pace: ``run_h = max(tau, persist)``, since a save waits for the previous persist.
A lane still running after ``max_failures`` failures is extrapolated at its pace so far (a
renewal-reward estimate of the same ratio), which bounds the cost of hopeless plans.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from toranalyze.plan.strategy import Phase, Recovery, Strategy, restart_phase

MAX_FAILURES = 1000  # per run; beyond it a run is extrapolated at its pace so far


@dataclass(frozen=True)
class Config:
    strategy: Strategy
    tau: float  # hours of training between saves
    work_h: float  # ideal hours of training of the run
    recovery: Recovery
    means: tuple[float, ...]  # mean up-time between failures of each class for this job (hours)


@dataclass(frozen=True)
class Result:
    """Per configuration: the TOR of its runs pooled (total ideal time over total wall time), its
    standard error, the runs' spread, and the time per failure by phase."""

    tor: float
    se: float
    p10: float
    p90: float
    failures: float  # per run
    per_failure: dict[str, float]  # hours per failure: detection, queue, restart, rollback
    capped: int  # runs extrapolated after max_failures


class _Lanes:
    """Every active lane's constants and state as columns of equal length; lanes that finish are
    written to ``out`` and dropped, so each step works on whole arrays."""

    CONST = ("tau", "run_h", "k", "dm", "dd", "pm", "pd", "survival", "work", "sm", "cyc", "lane")
    STATE = ("P", "Pd", "up", "wall", "kind", "detect", "queue", "restart", "saves", "failures")

    def __init__(self, configs: list[Config], runs: int, rng: np.random.Generator, shapes: np.ndarray):
        def col(f: Any) -> np.ndarray:
            return np.repeat(np.array([f(c) for c in configs], dtype=float), runs)

        st = [c.strategy for c in configs]
        v: dict[str, np.ndarray] = {
            "tau": col(lambda c: c.tau), "run_h": col(lambda c: max(c.tau, c.strategy.max_persist())),
            "k": col(lambda c: c.strategy.k), "work": col(lambda c: c.work_h),
            "dm": col(lambda c: (c.strategy.memory or c.strategy.durable).save_h),
            "dd": col(lambda c: c.strategy.durable.save_h),
            "pm": col(lambda c: (c.strategy.memory or c.strategy.durable).persist_h),
            "pd": col(lambda c: c.strategy.durable.persist_h),
            "survival": col(lambda c: c.strategy.survival if c.strategy.k > 1 else 0.0),
            "lane": np.arange(len(st) * runs, dtype=float),
        }
        v["sm"] = v["run_h"] + v["dm"]
        v["cyc"] = (v["k"] - 1) * v["sm"] + v["run_h"] + v["dd"]
        # Detection and queueing hold no GPUs, so their spread moves no mean: they take their mean,
        # which spares the estimate the heavy tails of their fitted lognormals (sample means of a
        # sigma-2 lognormal fall short of the mean most of the time, and its variance is unstable).
        for name, f in (("detect", lambda c: Phase(c.recovery.detect.mean_h)),
                        ("queue", lambda c: Phase(c.recovery.queue.mean_h)),
                        ("mem", lambda c: restart_phase(c.recovery, c.strategy.memory or c.strategy.durable)),
                        ("disk", lambda c: restart_phase(c.recovery, c.strategy.durable))):
            mean, sigma = col(lambda c, f=f: f(c).mean_h), col(lambda c, f=f: f(c).sigma)
            v[f"{name}_mean"], v[f"{name}_sigma"] = mean, np.where(mean > 0, sigma, 0.0)
            v[f"{name}_mu"] = np.log(np.where(mean > 0, mean, 1.0)) - v[f"{name}_sigma"] ** 2 / 2.0
        n = len(v["tau"])
        v.update({k: np.zeros(n) for k in self.STATE})
        self.v = v
        self.means = np.repeat(np.array([c.means for c in configs], dtype=float).reshape(len(configs), -1), runs, 0)
        self.nxt = _gaps(rng, self.means, shapes)
        self.out = {k: np.zeros(n) for k in ("x", "y", "detect", "queue", "restart", "saves", "failures")}
        self.capped = np.zeros(n, dtype=bool)  # runs stopped at the failure budget

    def __getitem__(self, name: str) -> np.ndarray:
        return self.v[name]

    def __len__(self) -> int:
        return len(self.v["tau"])

    def offset(self, q: np.ndarray) -> np.ndarray:
        """Time from the start of a durable cycle to the end of save ``q`` (counted from 0)."""
        c = np.floor(q / self["k"])
        return c * self["cyc"] + (q - c * self["k"]) * self["sm"]

    def span(self, j: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Time from cycle position ``j`` to the end of the ``n``-th save after it."""
        rest = self["cyc"] - j * self["sm"]  # to the end of the cycle's durable save
        return np.where(j + n < self["k"], n * self["sm"], rest + self.offset(np.maximum(j + n - self["k"], 0.0)))

    def saves_by(self, j: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Saves ended within ``g`` of running from cycle position ``j`` (counted from ``g`` itself:
        a difference of offsets would lose a save to rounding at its very end)."""
        k, sm, cyc = self["k"], self["sm"], self["cyc"]
        rest = cyc - j * sm
        in_cycle = np.minimum(np.floor(g / sm), k - 1 - j)
        after = np.maximum(g - rest, 0.0)
        c = np.floor(after / cyc)
        more = (k - j) + c * k + np.minimum(np.floor(np.maximum(after - c * cyc, 0.0) / sm), k - 1)
        return np.where(g < rest, in_cycle, more)

    def draw(self, rng: np.random.Generator, name: str) -> np.ndarray:
        """A duration of phase ``name`` per lane (lognormal around the config's mean)."""
        mean, sigma = self[f"{name}_mean"], self[f"{name}_sigma"]
        if not sigma.any():  # fixed durations: no draw
            return mean
        z = rng.standard_normal(len(self))
        return np.where(mean > 0, np.exp(self[f"{name}_mu"] + sigma * z), 0.0)

    def retire(self, done: np.ndarray, x: np.ndarray) -> None:
        """Record the lanes ``done`` (with work ``x``) and drop them from the active columns."""
        ids = self["lane"][done].astype(int)
        self.out["x"][ids] = x[done]
        self.out["y"][ids] = self["wall"][done]
        for k in ("detect", "queue", "restart", "saves", "failures"):
            self.out[k][ids] = self[k][done]
        keep = ~done
        self.v = {k: a[keep] for k, a in self.v.items()}
        self.means, self.nxt = self.means[keep], self.nxt[keep]


def _gaps(rng: np.random.Generator, means: np.ndarray, log_adj: np.ndarray) -> np.ndarray:
    """Weibull gaps of the given means (inf where a mean is inf or 0); ``log_adj`` holds each
    draw's ``(-lgamma(1 + 1/shape), 1/shape)``. A Weibull draw of shape k is E ** (1/k) of a
    unit exponential E, taken in logs so that tiny shapes stay finite."""
    e = rng.standard_exponential(means.shape)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        g = np.exp(np.log(means) + log_adj[0] + np.log(e) * log_adj[1])
    return np.where(np.isfinite(means) & (means > 0), g, np.inf)


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a mod b`` of whole numbers held as floats (numpy's float mod is many times slower)."""
    return a - np.floor(a / b) * b


def _finish_time(L: _Lanes) -> tuple[np.ndarray, np.ndarray]:
    """Time to finish from a restart at the committed position, and its saves' blocking time."""
    rem = np.maximum(L["work"] - L["P"] * L["tau"], 0.0)
    m = np.maximum(np.ceil(rem / L["tau"] - 1e-9) - 1.0, 0.0)  # saves before the end
    nd = np.floor((L["P"] + m) / L["k"]) - np.floor(L["P"] / L["k"])
    blocking = (m - nd) * L["dm"] + nd * L["dd"]
    return m * L["run_h"] + (rem - m * L["tau"]) + blocking, blocking


def _commit(L: _Lanes, g: np.ndarray, going: np.ndarray) -> None:
    """Count the saves committed within ``g`` of running since the restart, on lanes ``going``
    (an asynchronous save commits its persist after its end; the persist never outlasts the
    interval, so only the last save ended can still be pending)."""
    k, P = L["k"], L["P"]
    j = _mod(P, k)
    g = np.where(going, g, 0.0)  # (lanes not running here may hold an infinite gap)
    n1 = L.saves_by(j, g)
    last = j + n1
    lag = np.where(_mod(last, k) == 0, L["pd"], L["pm"])
    done = n1 - ((n1 >= 1) & (g < L.span(j, n1) + lag))
    nd = np.floor((P + n1) / k) - np.floor(P / k)
    L["saves"][:] += (n1 - nd) * L["dm"] + nd * L["dd"]
    P += done
    np.maximum(L["Pd"], np.floor(P / k) * k, out=L["Pd"])


def _fail(L: _Lanes, hit: np.ndarray, rng: np.random.Generator, adj: np.ndarray) -> None:
    """Lanes ``hit`` meet a failure at their next clock: downtime, a fresh gap for the class that
    fired, and the restart they now need (from memory when its copy survived)."""
    rows = np.flatnonzero(hit)
    if not len(rows):
        return
    which = L.nxt[rows].argmin(axis=1)
    f = L.nxt[rows, which]
    L["up"][rows] = f
    det, que = L.draw(rng, "detect")[rows], L.draw(rng, "queue")[rows]
    L["wall"][rows] += det + que
    L["detect"][rows] += det
    L["queue"][rows] += que
    L["failures"][rows] += 1
    L.nxt[rows, which] = f + _gaps(rng, L.means[rows, which], adj[:, which])
    mem = (rng.random(len(rows)) < L["survival"][rows]) & (L["kind"][rows] != 2)
    L["kind"][rows] = np.where(mem, 1, 2)
    L["P"][rows] = np.where(mem, L["P"][rows], L["Pd"][rows])


def _step(L: _Lanes, rng: np.random.Generator, adj: np.ndarray) -> None:
    gap0 = L.nxt.min(axis=1, initial=np.inf) - L["up"]
    kind = L["kind"]
    R = np.where(kind == 1, L.draw(rng, "mem"), np.where(kind == 2, L.draw(rng, "disk"), 0.0))
    in_restart = gap0 < R
    spent = np.where(in_restart, gap0, R)
    L["wall"][:] += spent
    L["restart"][:] += spent
    L["up"][:] += spent
    kind[~in_restart] = 0  # restarted: the next failure strikes a running job
    g = np.maximum(gap0 - R, 0.0)
    need, blocking = _finish_time(L)
    fin = ~in_restart & (g >= need)
    going = ~in_restart & ~fin
    L["wall"][:] += np.where(fin, need, np.where(going, g, 0.0))
    L["saves"][:] += np.where(fin, blocking, 0.0)
    _commit(L, g, going)
    _fail(L, in_restart | going, rng, adj)
    if fin.any():
        L.retire(fin, L["work"])


def simulate(configs: list[Config], shapes: tuple[float, ...], runs: int, seed: int,
             max_failures: int = MAX_FAILURES) -> list[Result]:
    """Simulate ``runs`` runs of every configuration (common random numbers: one generator)."""
    sh = np.array(shapes, dtype=float).reshape(-1)
    adj = np.vstack([-np.array([math.lgamma(1.0 + 1.0 / x) for x in sh]), 1.0 / sh]) if len(sh) else np.zeros((2, 0))
    rng = np.random.default_rng(seed)
    L = _Lanes(configs, runs, rng, adj)
    for _ in range(max_failures + 1):
        if not len(L):
            break
        _step(L, rng, adj)
    _settle(L, rng, adj, max_failures)
    return [_result(L, c, runs) for c in range(len(configs))]


def _settle(L: _Lanes, rng: np.random.Generator, adj: np.ndarray, budget: int) -> None:
    """Stop the runs left at the failure budget where their work is all durable (a restart from
    storage, or the start of a durable cycle): a renewal point, so the work over the time so far
    estimates the long-run ratio without the bias of counting, or dropping, work only in memory."""
    for _ in range(budget + 1):
        if not len(L):
            return
        settled = L["P"] == L["Pd"]
        L.capped[L["lane"][settled].astype(int)] = True
        if settled.any():
            L.retire(settled, L["P"] * L["tau"])
        if len(L):
            _step(L, rng, adj)
    if len(L):
        L.capped[L["lane"].astype(int)] = True
        L.retire(np.ones(len(L), dtype=bool), L["Pd"] * L["tau"])  # what is durably saved


def _result(L: _Lanes, c: int, runs: int) -> Result:
    """The ratio of sums over the configuration's runs (finished runs whole, runs stopped at the
    failure budget with the work they committed so far: a renewal-reward estimate of the same
    ratio), with its delta-method standard error."""
    sl = slice(c * runs, (c + 1) * runs)
    o = {k: a[sl] for k, a in L.out.items()}
    x, y = o["x"], o["y"]
    tor = float(x.sum() / y.sum()) if y.sum() > 0 else 1.0
    se = 0.0
    if runs > 1 and y.sum() > 0:
        se = float(np.sqrt(np.sum((x - tor * y) ** 2) / (runs * (runs - 1))) / y.mean())
    with np.errstate(divide="ignore", invalid="ignore"):
        per_run = np.where(y > 0, x / y, 1.0)
    n = float(o["failures"].sum())
    spent = {k: float(o[k].sum()) for k in ("detect", "queue", "restart", "saves")}
    rollback = float(y.sum() - x.sum()) - sum(spent.values())
    per = {"detection": spent["detect"], "queue": spent["queue"], "restart": spent["restart"],
           "rollback": max(rollback, 0.0)}
    return Result(tor, se, float(np.quantile(per_run, 0.1)), float(np.quantile(per_run, 0.9)), n / runs,
                  {k: (v / n if n else 0.0) for k, v in per.items()}, int(L.capped[sl].sum()))
