"""How long `toranalyze plan` takes as the planned job grows: 8 GPUs beside 16k and 100k.

The Monte Carlo advances every run of every configuration of a plan together, failure by failure,
and stops a run at its failure budget (extrapolating its pace), so a plan's cost is bounded by
runs x configurations x budget whatever the job size. The target: under 5 s at 100k GPUs.

Usage::

    python benchmarks/plan_speed.py                      # a rates file drawn from the fleet simulator
    python benchmarks/plan_speed.py --rates rates.json --compare --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from toranalyze.fleet.rates import build_rates, dumps, read_rates
from toranalyze.plan import PlanOptions, plan
from toranalyze.simulate.fleet_truth import FleetSpec, generate_fleet

SIZES = (8, 16384, 100_000)


def sample_rates() -> dict:
    fr, _ = generate_fleet(replace(FleetSpec(), jobs=30), 11)
    return dict(json.loads(dumps(build_rates(fr["jobs"], fr["attempts"], fr["incidents"], fr["exposure"]))))


def measure(doc: dict, gpus: int, compare: bool, runs: int) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    p = plan(doc, PlanOptions(gpus=gpus, compare=compare, runs=runs))
    return {"gpus": gpus, "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "tor": p["closed_form"]["tor"], "mc": p["monte_carlo"]["tor"], "capped": p["monte_carlo"]["capped"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", type=Path, help="a rates.json [default: one from the fleet simulator]")
    ap.add_argument("--compare", action="store_true", help="plan all four strategies too")
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--json", type=Path, help="write the rows here")
    a = ap.parse_args()
    doc = read_rates(a.rates) if a.rates else sample_rates()
    rows = [measure(doc, g, a.compare, a.runs) for g in SIZES]
    for r in rows:
        print(f"{r['gpus']:>7} GPUs: {r['wall_s']:6.2f} s wall, {r['cpu_s']:6.2f} s CPU; TOR {r['tor']:.4f} "
              f"(Monte Carlo {r['mc']:.4f}, {r['capped']} runs at the failure budget)")
    print(f"100k / 8 GPUs: {rows[-1]['wall_s'] / rows[0]['wall_s']:.2f}x")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0 if rows[-1]["wall_s"] < 5.0 else 1


if __name__ == "__main__":
    sys.exit(main())
