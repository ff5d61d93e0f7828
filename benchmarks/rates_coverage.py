"""Do the fleet fits recover known rates? Interval coverage, Weibull shapes and lemon detection.

Fleets come from the truth-level generator ``toranalyze.simulate.fleet_truth`` (the four fleet
tables drawn from known rates and planted lemon nodes; no logs are written or parsed, so this
scores the statistics alone). Per fleet and per unexpected class with at least 5 failures, the
95% interval in the truth's unit must hold the true rate (the planted lemons' extra failures
included); Weibull shapes of classes with at least 50 failures and shape != 1 must be within
15%; planted lemons must be found with few false positives.

Usage::

    python benchmarks/rates_coverage.py --fleets 200 --first-seed 1
    python benchmarks/rates_coverage.py --fleets 20 --lemon-multiplier 40 --json benchmarks/out/cov.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from typing import Any

import polars as pl

from toranalyze.fleet import fit
from toranalyze.fleet.lemons import lemon_nodes
from toranalyze.simulate.fleet_truth import FleetSpec, generate_fleet


def _unit_factor(fit_unit: str, truth_unit: str, gpn: float) -> float | None:
    """Exposure of ``truth_unit`` per exposure of ``fit_unit`` (None when they do not convert)."""
    per_node = {"gpu_hour": gpn, "node_hour": 1.0}
    if fit_unit in per_node and truth_unit in per_node:
        return per_node[fit_unit] / per_node[truth_unit]
    return 1.0 if fit_unit == truth_unit else None


def score_fleet(spec: FleetSpec, seed: int) -> dict[str, Any]:
    frames, truth = generate_fleet(spec, seed)
    fail = fit.failures(frames["incidents"], frames["exposure"])
    jobs = fit.job_exposure(frames["exposure"])
    out: dict[str, Any] = {"seed": seed, "cover": [], "cover_weibull": [], "shape": [], "lemons": {}}
    for cls, t in truth["classes"].items():
        if t["planned"]:
            continue
        f = fit.fit_class(fail.filter(pl.col("failure_class") == cls), jobs, spec.gpus_per_node)
        if f["failures"] >= 5 and t["shape"] == 1.0:
            r = f["rates"][t["per"]]
            out["cover"].append({"class": cls, "k": f["failures"], "in": r["lo"] <= t["rate_effective"] <= r["hi"]})
        wb = f["weibull"]
        if f["failures"] >= 5 and t["shape"] != 1.0 and wb is not None:
            conv = _unit_factor(wb["unit"], t["per"], spec.gpus_per_node)
            if conv is not None:  # the long-run rate 1/mean in the truth's unit
                lo, hi = conv / wb["mean_hi"], conv / wb["mean_lo"]
                out["cover_weibull"].append({"class": cls, "k": f["failures"], "in": lo <= t["rate"] <= hi})
        if f["failures"] >= 50 and t["shape"] != 1.0 and f["weibull"] is not None:
            err = f["weibull"]["shape"] / t["shape"] - 1.0
            out["shape"].append({"class": cls, "k": f["failures"], "shape": f["weibull"]["shape"], "rel_err": err,
                                 "unit": f["weibull"]["unit"], "true_unit": t["per"]})
    found = {x["node"] for x in lemon_nodes(frames["incidents"], frames["exposure"])}
    planted = set(truth["lemons"])
    out["lemons"] = {"planted": len(planted), "found": len(found & planted), "false": len(found - planted)}
    return out


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    cover = [c for r in results for c in r["cover"]]
    shapes = [s for r in results for s in r["shape"]]
    cw = [c for r in results for c in r["cover_weibull"]]
    planted = sum(r["lemons"]["planted"] for r in results)
    by_class: dict[str, list[bool]] = {}
    for c in cover:
        by_class.setdefault(c["class"], []).append(c["in"])
    return {
        "fleets": len(results),
        "coverage": {"fits": len(cover), "covered": sum(c["in"] for c in cover),
                     "rate": sum(c["in"] for c in cover) / max(1, len(cover)),
                     "by_class": {k: round(sum(v) / len(v), 4) for k, v in sorted(by_class.items())}},
        "coverage_weibull_mean": {"fits": len(cw), "covered": sum(c["in"] for c in cw),
                                  "rate": sum(c["in"] for c in cw) / max(1, len(cw))},
        "weibull_shape": {"fits": len(shapes), "within_15pct": sum(abs(s["rel_err"]) <= 0.15 for s in shapes),
                          "rate": sum(abs(s["rel_err"]) <= 0.15 for s in shapes) / max(1, len(shapes)),
                          "median_abs_rel_err": sorted(abs(s["rel_err"]) for s in shapes)[len(shapes) // 2]
                          if shapes else None},
        "lemons": {"planted": planted, "found": sum(r["lemons"]["found"] for r in results),
                   "recall": sum(r["lemons"]["found"] for r in results) / max(1, planted),
                   "false_per_fleet": sum(r["lemons"]["false"] for r in results) / max(1, len(results))},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fleets", type=int, default=200)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=FleetSpec.jobs, help="jobs per fleet")
    ap.add_argument("--lemons", type=int, default=FleetSpec.lemons)
    ap.add_argument("--lemon-multiplier", type=float, default=FleetSpec.lemon_multiplier)
    ap.add_argument("--json", help="write the summary and per-fleet results here")
    a = ap.parse_args(argv)
    spec = replace(FleetSpec(), jobs=a.jobs, lemons=a.lemons, lemon_multiplier=a.lemon_multiplier)
    t0 = time.perf_counter()
    results = [score_fleet(spec, a.first_seed + i) for i in range(a.fleets)]
    summary = {**summarize(results), "seconds": round(time.perf_counter() - t0, 1),
               "spec": {"jobs": spec.jobs, "lemons": spec.lemons, "lemon_multiplier": spec.lemon_multiplier,
                        "first_seed": a.first_seed}}
    print(json.dumps(summary, indent=1))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as fh:
            json.dump({"summary": summary, "fleets": results}, fh, indent=1)
    ok = (0.93 <= summary["coverage"]["rate"] <= 0.97 and summary["weibull_shape"]["rate"] >= 0.9
          and summary["lemons"]["recall"] >= 0.9 and summary["lemons"]["false_per_fleet"] <= 1.0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
