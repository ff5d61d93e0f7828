"""Is the planner right? Closed form against Monte Carlo, and the numeric optimum against Daly.

1. Where the closed form's assumptions hold (exponential failures, fixed repair), the exact
   fail-stop closed form and the Monte Carlo of the run model must agree within 1% of TOR.
2. With Weibull failures (shape far from 1), does the simulated optimum interval beat Daly's
   (computed from the mean time between failures), and by how much? The gain is paired (common
   random numbers) and given with its 95% interval.

Usage::

    python benchmarks/plan_accuracy.py                 # full: 400 runs of 30 ideal days per point
    python benchmarks/plan_accuracy.py --runs 60 --days 10 --json benchmarks/out/plan.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from toranalyze.model import daly_interval, tor_fail_stop_exact
from toranalyze.plan.core import PlanOptions, optimum
from toranalyze.plan.montecarlo import Process, Repair, Schedule, simulate_tor

# (M, tau, delta, R) in minutes: the reference's worked rows plus a spread of regimes
CASES = [(180, 30, 1, 10), (1440, 60, 5, 30), (600, 20, 0.5, 5), (60, 30, 2, 10), (120, 15, 1, 20),
         (3000, 120, 10, 60), (300, 45, 3, 5), (90, 10, 0.5, 15), (720, 90, 2, 40), (240, 60, 5, 3)]
SHAPES = (0.5, 0.7, 1.0, 1.5, 2.0)


def closed_vs_mc(runs: int, days: float, seed: int) -> list[dict[str, Any]]:
    rows = []
    for k, (M, tau, d, R) in enumerate(CASES):
        job = Schedule(days * 24, tau / 60, d / 60)
        x = simulate_tor([Process("all", M / 60)], Repair(R / 60), job, runs, seed + k)
        cf = tor_fail_stop_exact(M, tau, d, R)
        se = float(x.std(ddof=1) / np.sqrt(len(x)))
        rows.append({"M_min": M, "tau_min": tau, "delta_min": d, "R_min": R, "closed_form": round(cf, 5),
                     "monte_carlo": round(float(x.mean()), 5), "se": round(se, 5),
                     "rel_diff": round(float(x.mean()) / cf - 1.0, 5)})
    return rows


def optimum_vs_daly(runs: int, days: float, seed: int, M: float, delta: float, R: float) -> list[dict[str, Any]]:
    """Per Weibull shape: Daly's interval (from the mean M), the simulated optimum and the gain."""
    rows = []
    daly = daly_interval(delta, M)
    for shape in SHAPES:
        procs = [Process("all", M, shape)]
        opts = PlanOptions(gpus=1, ckpt_save_h=delta, ideal_days=days, runs=runs, seed=seed)
        best = optimum(procs, Repair(R), opts, daly)
        rows.append({"shape": shape, "daly_h": round(daly, 4), "optimum_h": round(best["tau_h"], 4),
                     "tor_optimum": round(best["tor"], 5),
                     "gain": round(best["gain_over_daly"]["tor"], 5),
                     "gain_lo": round(best["gain_over_daly"]["lo"], 5),
                     "gain_hi": round(best["gain_over_daly"]["hi"], 5)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--days", type=float, default=30.0, help="ideal days per simulated run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mtbf", type=float, default=3.0, help="mean hours between failures (Weibull part)")
    ap.add_argument("--save", type=float, default=5 / 60, help="checkpoint save hours (Weibull part)")
    ap.add_argument("--repair", type=float, default=0.25, help="repair hours (Weibull part)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    cmp_rows = closed_vs_mc(a.runs, a.days, a.seed)
    opt_rows = optimum_vs_daly(a.runs, a.days, a.seed, a.mtbf, a.save, a.repair)
    worst = max(abs(r["rel_diff"]) for r in cmp_rows)
    out = {"closed_vs_monte_carlo": cmp_rows, "max_abs_rel_diff": worst, "optimum_vs_daly": opt_rows,
           "settings": vars(a), "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return 0 if worst <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
