"""Small versions of benchmarks/rates_coverage.py and benchmarks/plan_accuracy.py (slow)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench() -> None:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))


@pytest.mark.slow
def test_rates_coverage_small(bench: None) -> None:
    import rates_coverage  # type: ignore[import-not-found]

    spec = rates_coverage.FleetSpec()
    s = rates_coverage.summarize([rates_coverage.score_fleet(spec, seed) for seed in range(900, 912)])
    assert s["coverage"]["fits"] >= 40 and s["coverage"]["rate"] >= 0.85
    assert s["weibull_shape"]["fits"] >= 15 and s["weibull_shape"]["rate"] >= 0.8
    assert s["lemons"]["recall"] >= 0.8 and s["lemons"]["false_per_fleet"] <= 1.0


@pytest.mark.slow
def test_plan_accuracy_small(bench: None) -> None:
    import plan_accuracy  # type: ignore[import-not-found]

    rows = plan_accuracy.closed_vs_mc(runs=150, days=20, seed=3)
    assert sum(abs(r["z"]) <= 3 for r in rows) >= len(rows) - 1  # 3-SE agreement (one miss in 32 is chance)
    opt = {r["shape"]: r for r in plan_accuracy.optimum_vs_closed(60, 10, 3, M=3.0, delta=5 / 60, R=0.25)}
    assert opt[1.0]["gain"] <= 3 * opt[1.0]["gain_se"] + 1e-9  # the closed form's interval is the best for Poisson
