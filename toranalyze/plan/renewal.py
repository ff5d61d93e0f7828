"""The exact long-run TOR of a checkpoint strategy under Poisson failures (a Markov renewal model).

Failures strike up-time (running, saving, and the exposed part of a restart) at rate ``1/M``. The
run is a chain of states: running from committed save ``j`` towards the commit of save ``j+1``
(fresh after a restart, or steady after the previous commit), restarting from memory to ``j``, or
restarting from storage to the last durable save. Each state lasts a fixed or random time or ends
in a failure; a failure costs the non-exposed downtime (detection and queue) and sends the run to
a restart. The expected time of one durable cycle (``k`` saves) comes from one linear solve, so
the TOR is exact for any strategy; for one blocking tier it reduces to Daly's complete model
``TOR = tau / ((M + D) e^(R/M) (e^((tau+delta)/M) - 1))``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from toranalyze.plan.strategy import Phase, Recovery, Strategy, restart_phase

COSTS = ("time", "failures", "down", "restart")  # what each state's visit adds, solved for together


@dataclass(frozen=True)
class Cycle:
    """Expected totals of one durable cycle (``k`` saves, ``k * tau`` of work committed)."""

    work_h: float
    time_h: float
    failures: float
    down_h: float
    restart_h: float
    saves_h: float  # blocking save time of the cycle's k saves

    @property
    def tor(self) -> float:
        return self.work_h / self.time_h

    @property
    def rollback_h(self) -> float:
        """Running and saving lost to failures (and partly done saves)."""
        return max(0.0, self.time_h - self.work_h - self.saves_h - self.down_h - self.restart_h)


def _segment(s: Strategy, tau: float, j: int, fresh: bool) -> float:
    """Time from committed save ``j`` (or a restart to it) to the commit of save ``j+1``; a save
    waits for the previous persist, so the work runs at ``max(tau, persist)`` a save."""
    nxt = s.tier(j + 1)
    d = max(tau, s.max_persist()) + nxt.save_h + nxt.persist_h
    return d if fresh else d - s.tier(j).persist_h


class _Chain:
    def __init__(self, s: Strategy, rate: float, rec: Recovery):
        self.k, self.rate, self.down = s.k, rate, rec.down_h
        self.survival = s.survival if s.k > 1 else 0.0
        n = 3 * self.k + 1
        self.P = np.zeros((n, n))
        self.c = np.zeros((n, len(COSTS)))

    def run(self, j: int, fresh: bool) -> int:
        return 2 * j + int(fresh)

    def mem(self, j: int) -> int:
        return 2 * self.k + j

    @property
    def disk(self) -> int:
        return 3 * self.k

    def visit(self, state: int, ok: float, mean_h: float, on_ok: int | None, fail_to: list[tuple[int, float]],
              restart: bool = False) -> None:
        """A state that succeeds with probability ``ok`` (going to ``on_ok``; None ends the cycle)
        after ``mean_h`` of expected time, else fails and goes to ``fail_to``."""
        if on_ok is not None:
            self.P[state, on_ok] += ok
        for to, p in fail_to:
            self.P[state, to] += (1.0 - ok) * p
        self.c[state] = (mean_h + (1.0 - ok) * self.down, 1.0 - ok, (1.0 - ok) * self.down,
                         mean_h if restart else 0.0)

    def after_failure(self, j: int) -> list[tuple[int, float]]:
        return [(self.mem(j), self.survival), (self.disk, 1.0 - self.survival)]


def _expected_in(rate: float, d: float) -> tuple[float, float]:
    """P(no failure in d) and E[min(X, d)] for X ~ Exp(rate)."""
    if rate <= 0:
        return 1.0, d
    ok = math.exp(-rate * d)
    return ok, -math.expm1(-rate * d) / rate


def _phase_in(rate: float, ph: Phase) -> tuple[float, float]:
    ok = ph.survival(rate)
    return ok, ((1.0 - ok) / rate if rate > 0 else ph.mean_h)


def cycle(s: Strategy, tau: float, rate: float, rec: Recovery) -> Cycle:
    """Expected totals of one durable cycle, starting just after a durable commit."""
    ch = _Chain(s, rate, rec)
    for j in range(ch.k):
        for fresh in (False, True):
            ok, mean = _expected_in(rate, _segment(s, tau, j, fresh))
            ch.visit(ch.run(j, fresh), ok, mean, ch.run(j + 1, False) if j + 1 < ch.k else None, ch.after_failure(j))
        if s.memory is not None and ch.k > 1:
            ok, mean = _phase_in(rate, restart_phase(rec, s.memory))
            ch.visit(ch.mem(j), ok, mean, ch.run(j, True), ch.after_failure(j), restart=True)
    ok, mean = _phase_in(rate, restart_phase(rec, s.durable))
    ch.visit(ch.disk, ok, mean, ch.run(0, True), [(ch.disk, 1.0)], restart=True)
    # (states never entered keep an empty row: the system stays regular)
    totals = np.linalg.solve(np.eye(len(ch.P)) - ch.P, ch.c)[ch.run(0, False)]
    saves = sum(s.tier(j).save_h for j in range(1, ch.k + 1))
    time_h, failures, down_h, restart_h = (float(x) for x in totals)
    return Cycle(ch.k * tau, time_h, failures, down_h, restart_h, saves)


def tor(s: Strategy, tau: float, rate: float, rec: Recovery) -> float:
    """The long-run TOR; 0 where failures come so fast that no cycle ever completes (the system
    is singular, or its solution overflows)."""
    try:
        t = cycle(s, tau, rate, rec).tor
    except (ArithmeticError, np.linalg.LinAlgError):
        return 0.0
    return t if math.isfinite(t) and t > 0 else 0.0


def daly_complete(M: float, tau: float, delta: float, R: float, D: float = 0.0) -> float:
    """Daly (2006), complete model: ``T_w = (M + D) e^(R/M) (e^((tau+delta)/M) - 1) T_s / tau``."""
    return tau / ((M + D) * math.exp(R / M) * math.expm1((tau + delta) / M))
