"""``plan``: every answer of a plan, its Monte Carlo configurations simulated in one call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toranalyze.plan import answers
from toranalyze.plan.core import Job, PlanOptions, check_options, interval, job, sizes_around, tor_at
from toranalyze.plan.montecarlo import Config, Result, simulate
from toranalyze.plan.strategy import STRATEGIES, Strategy


@dataclass
class _Sims:
    """The Monte Carlo configurations of one plan, simulated together in one call."""

    configs: list[Config] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)

    def add(self, c: Config) -> int:
        self.configs.append(c)
        return len(self.configs) - 1

    def run(self, j: Job) -> None:
        self.results = simulate(self.configs, j.shapes, j.opts.runs, j.opts.seed)

    def tor(self, i: int, j: Job) -> dict[str, float]:
        r = self.results[i]
        return {"tor": j.rho * r.tor, "se": j.rho * r.se, "lo": j.rho * (r.tor - 1.96 * r.se),
                "hi": j.rho * (r.tor + 1.96 * r.se), "p10": j.rho * r.p10, "p90": j.rho * r.p90,
                "failures": r.failures, "capped": r.capped}


def plan(doc: dict[str, Any], opts: PlanOptions) -> dict[str, Any]:
    """The full plan: inputs used, predicted TOR both ways, best interval, the run's losses, the
    strategies side by side (``compare``) and job sizes around the planned one."""
    check_options(opts)
    j, sources = job(doc, opts)
    s, g = j.strategy(), opts.gpus
    tau, sources["interval"] = interval(j, s, g)
    sims = _Sims()
    main = sims.add(j.config(s, tau, g))
    grid = _grid(j, s, tau, g, sims)
    rows = _what_if_configs(j, s, g, sims)
    versus = _compare_configs(j, g, sims) if opts.compare else []
    sims.run(j)
    mc = sims.tor(main, j)
    out = answers.summary(j, s, tau, doc, sources)
    out.update(monte_carlo=mc, why_differ=why_differ(out["closed_form"]["tor"], mc, j),
               simulated_intervals=[{"tau_h": t, **sims.tor(i, j)} for t, i in grid],
               what_if=[{**r, **_mc_cols(sims, i, j)} for r, i in rows],
               compare=[{**r, **_mc_cols(sims, i, j)} for r, i in versus])
    out["run"]["lost_per_failure_h"]["monte_carlo"] = sims.results[main].per_failure
    out["curves"] = curves(j, tau, [r["strategy"] for r, _ in versus] or [opts.strategy])
    return out


def curves(j: Job, tau: float, names: list[str]) -> dict[str, Any]:
    """Closed-form TOR against the interval for each strategy (1/8 to 8 times the plan's
    interval), and against job size at each size's best interval (1/8 to 8 times the GPUs)."""
    g = j.opts.gpus
    taus = tau * np.geomspace(0.125, 8.0, 41)
    sizes = np.unique(np.maximum(1, np.round(g * np.geomspace(0.125, 8.0, 25)))).astype(int)
    s = j.strategy()
    return {
        "interval": {n: [[float(t), tor_at(j, j.strategy(n), float(t), g)] for t in taus] for n in names},
        "size": [[int(x), tor_at(j, s, interval(j, s, int(x))[0], int(x))]
                 for x in sizes],
    }


def _mc_cols(sims: _Sims, i: int, j: Job) -> dict[str, float]:
    t = sims.tor(i, j)
    return {"tor_monte_carlo": t["tor"], "mc_se": t["se"]}


def _grid(j: Job, s: Strategy, tau: float, g: int, sims: _Sims) -> list[tuple[float, int]]:
    """With Weibull classes the closed form's best interval is only a guess: simulate around it."""
    if all(abs(x - 1.0) < 1e-9 for x in j.shapes) or j.opts.ckpt_interval_h:
        return []
    return [(tau * f, sims.add(j.config(s, tau * f, g))) for f in (0.5, 0.7, 1.4, 2.0)]


def _what_if_configs(j: Job, s: Strategy, g: int, sims: _Sims) -> list[tuple[dict[str, Any], int]]:
    rows = []
    for size in sizes_around(g):
        tau = interval(j, s, size)[0]
        lam = j.rate(size)
        rows.append(({"gpus": size, "tau_h": tau, "mtbf_h": 1.0 / lam if lam > 0 else None,
                      "tor_closed_form": tor_at(j, s, tau, size)}, sims.add(j.config(s, tau, size))))
    return rows


def _compare_configs(j: Job, g: int, sims: _Sims) -> list[tuple[dict[str, Any], int]]:
    rows = []
    for name in STRATEGIES:
        s = j.strategy(name)
        tau, why = interval(j, s, g)
        rows.append(({"strategy": name, "describe": s.describe(), "best_interval_h": tau, "interval_source": why,
                      "tor_closed_form": tor_at(j, s, tau, g)}, sims.add(j.config(s, tau, g))))
    return rows


AGREE_SE = 3.0


def why_differ(cf: float, mc: dict[str, float], j: Job) -> list[str]:
    """Why the closed form and the Monte Carlo disagree, when they do."""
    if abs(mc["tor"] - cf) <= max(AGREE_SE * mc["se"], 1e-3 * cf):
        return [f"they agree within {AGREE_SE:g} standard errors of the Monte Carlo"]
    out = []
    odd = [f"{c.name} (shape {c.shape:.2f})" for c in j.classes if abs(c.shape - 1.0) > 1e-9]
    if odd:
        out.append("Weibull shape != 1 for " + ", ".join(odd) + ": failures are not a Poisson process, so the "
                   "closed form (exponential) misjudges how often work is lost; the simulation is the reference")
    if mc["capped"]:
        out.append(f"{mc['capped']} simulated runs met the failure budget and were extrapolated at their pace")
    out.append(f"a finite run of {j.opts.ideal_days:g} ideal days starts afresh and ends mid-interval; the closed "
               "form is the long-run ratio")
    return out

