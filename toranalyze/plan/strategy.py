"""Checkpoint strategies and recovery phases: what a planned run does between and after failures.

A strategy saves every ``tau`` hours of running. Each save blocks training for ``save_h``; an
asynchronous save then persists in the background for ``persist_h`` while training goes on, and
only a *completed* save can be restored (so a failure during the persist loses back to the save
before). A multi-tier strategy keeps every save in (peer) memory and makes every ``every``-th one
durable; a failure leaves the memory copy usable with probability ``survival`` (else training
rolls back to the last durable save). Times are hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from toranalyze.plan.names import STRATEGIES


@dataclass(frozen=True)
class Tier:
    """One kind of save: blocking time, background persist time, restore time."""

    save_h: float  # training stops this long per save
    persist_h: float = 0.0  # then the save completes this much later (asynchronous), training going on
    load_h: float = 0.0  # reading it back after a failure (part of the restart)


@dataclass(frozen=True)
class Strategy:
    name: str
    durable: Tier
    memory: Tier | None = None  # in-memory / peer tier, when there is one
    every: int = 1  # a durable save every ``every`` saves (the others stay in memory)
    survival: float = 0.0  # probability a failure leaves the memory copy usable

    @property
    def k(self) -> int:
        return self.every if self.memory is not None else 1

    def tier(self, position: int) -> Tier:
        """The tier of the save that commits ``position`` (saves count from 1; every k-th is durable)."""
        return self.durable if self.memory is None or position % self.k == 0 else self.memory

    def max_persist(self) -> float:
        return max(self.durable.persist_h, self.memory.persist_h if self.memory else 0.0)

    def describe(self) -> str:
        d = self.durable
        text = f"save {_h(d.save_h)}" + (f" + {_h(d.persist_h)} in the background" if d.persist_h else "")
        if self.memory is None:
            return text
        m = self.memory
        return (f"in memory: save {_h(m.save_h)}, restore {_h(m.load_h)}, usable after {self.survival:.0%} of "
                f"failures; durable every {self.every}: {text}")


def _h(h: float) -> str:
    s = h * 3600
    return f"{s:.3g} s" if s < 120 else (f"{s / 60:.3g} min" if s < 7200 else f"{h:.3g} h")


@dataclass(frozen=True)
class Phase:
    """A recovery phase's duration (hours): its mean, and the sigma of a lognormal with that mean
    (0: always the mean)."""

    mean_h: float
    sigma: float = 0.0

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.sigma <= 0 or self.mean_h <= 0:
            return np.full(n, self.mean_h)
        return rng.lognormal(math.log(self.mean_h) - self.sigma**2 / 2.0, self.sigma, n)

    def survival(self, rate: float) -> float:
        """P(no failure during the phase) = E[exp(-rate * duration)] (Gauss-Hermite over the lognormal)."""
        if self.mean_h <= 0 or rate <= 0:
            return 1.0
        if self.sigma <= 0:
            return math.exp(-rate * self.mean_h)
        x, w = np.polynomial.hermite_e.hermegauss(64)
        d = np.exp(math.log(self.mean_h) - self.sigma**2 / 2.0 + self.sigma * x)
        return float(np.sum(w * np.exp(-rate * d)) / math.sqrt(2 * math.pi))


@dataclass(frozen=True)
class Recovery:
    """What a failure costs before training runs again. Detection and queueing hold no GPUs, so no
    failure can strike them; the start-up (placement, process start, warm-up) and the restore do,
    and a failure there starts the recovery again (Daly's complete model)."""

    detect: Phase
    queue: Phase
    startup: Phase  # process start to training, without the checkpoint load

    @property
    def down_h(self) -> float:
        return self.detect.mean_h + self.queue.mean_h


def restart_phase(rec: Recovery, tier: Tier) -> Phase:
    """The exposed part of a restart from ``tier``: start-up plus the tier's load (the load is
    fixed, so the sum keeps the start-up's spread around a larger mean)."""
    mean = rec.startup.mean_h + tier.load_h
    if mean <= 0:
        return Phase(0.0)
    # a lognormal of the same standard deviation as the start-up's, around the larger mean
    sd = rec.startup.mean_h * math.sqrt(math.expm1(rec.startup.sigma**2)) if rec.startup.sigma > 0 else 0.0
    return Phase(mean, math.sqrt(math.log1p((sd / mean) ** 2)) if sd > 0 else 0.0)


def named(name: str, durable_save_h: float, opts: dict[str, float]) -> Strategy:
    """The four strategies ``plan --compare`` sets side by side, from the run's save and restore
    times (``opts``: snapshot_h, persist_h, mem_save_h, mem_load_h, load_h, every, survival)."""
    load = opts.get("load_h", 0.0)
    durable = Tier(durable_save_h, 0.0, load)
    if name == "blocking":
        return Strategy("blocking", durable)
    if name == "async":
        return Strategy("async", Tier(opts["snapshot_h"], opts.get("persist_h", durable_save_h), load))
    mem = Tier(opts["mem_save_h"], 0.0, opts["mem_load_h"])
    every, survival = max(2, int(opts["every"])), opts["survival"]
    if name == "memory":  # peer-memory saves; every n-th also written to storage in the background
        return Strategy("memory", Tier(opts["mem_save_h"], durable_save_h, load), mem, every, survival)
    if name == "multitier":  # peer-memory saves; every n-th a blocking durable save
        return Strategy("multitier", durable, mem, every, survival)
    raise ValueError(f"unknown strategy {name!r} (one of {', '.join(STRATEGIES)})")



