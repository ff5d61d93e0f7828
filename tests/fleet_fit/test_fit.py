"""Censored rate fits, Weibull fits and the public reference numbers they must reproduce."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from toranalyze.fleet import fit
from toranalyze.fleet.rates import build_rates
from toranalyze.fleet.schema import EXPOSURE_SCHEMA, FLEET_ATTEMPTS_SCHEMA, FLEET_INCIDENTS_SCHEMA, JOBS_SCHEMA
from toranalyze.fleet.weibull import fit_weibull
from toranalyze.simulate.fleet_truth import conform

# Llama 3 405B, 54-day snapshot on 16,384 GPUs (arXiv 2407.21783, Table 5): unexpected root causes.
LLAMA3_UNEXPECTED = {
    "faulty_gpu": 148, "gpu_hbm3_memory": 72, "software_bug": 54, "network_switch_cable": 35,
    "host_maintenance": 32, "gpu_sram_memory": 19, "gpu_system_processor": 17, "nic": 7,
    "nccl_watchdog_timeouts": 7, "silent_data_corruption": 6, "gpu_thermal_interface_sensor": 6, "ssd": 3,
    "power_supply": 3, "server_chassis": 2, "io_expansion_board": 2, "dependency": 2, "cpu": 2,
    "system_memory": 2,
}
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def one_job_fleet(classes: list[str], days: float, gpus: int, planned: int = 0) -> dict[str, pl.DataFrame]:
    """One job running ``days`` with failures of ``classes`` spread at random (seeded) over its
    running time (and ``planned`` maintenance stops), down time negligible; a node-less exposure
    row per attempt."""
    kinds = [(c, False) for c in classes] + [("maintenance", True)] * planned
    rng = np.random.default_rng(0)
    order = rng.permutation(len(kinds))
    n = len(kinds) + 1
    cuts = [T0, *(T0 + timedelta(days=float(d)) for d in np.sort(rng.uniform(0, days, n - 1))),
            T0 + timedelta(days=days)]
    att, inc, exp = [], [], []
    for a in range(n):
        t0, t1 = cuts[a], cuts[a + 1]
        att.append({"run": "r", "job": "j", "attempt": a, "t_start": t0, "t_end": t1, "gpus": gpus})
        h = (t1 - t0).total_seconds() / 3600
        exp.append({"run": "r", "job": "j", "attempt": a, "node": None, "t_start": t0, "t_end": t1, "hours": h,
                    "gpus": gpus, "nodes": gpus // 8, "gpu_hours": h * gpus, "node_hours": h * gpus / 8,
                    "job_gpus": gpus})
        if a < n - 1:
            cls, pl_ = kinds[order[a]]
            inc.append({"run": "r", "job": "j", "incident": a, "attempt": a, "root_cause": cls, "planned": pl_,
                        "nodes": [], "t_last_progress": t1, "t_detected": t1, "t_resumed": t1})
    jobs = [{"run": "r", "job": "j", "gpus": gpus, "nodes": gpus // 8, "t_start": T0, "t_end": cuts[-1]}]
    return {"jobs": conform(jobs, JOBS_SCHEMA), "attempts": conform(att, FLEET_ATTEMPTS_SCHEMA),
            "incidents": conform(inc, FLEET_INCIDENTS_SCHEMA), "exposure": conform(exp, EXPOSURE_SCHEMA)}


@pytest.fixture(scope="module")
def llama3() -> dict:
    classes = [c for c, k in LLAMA3_UNEXPECTED.items() for _ in range(k)]
    f = one_job_fleet(classes, days=54, gpus=16384, planned=47)
    return build_rates(f["jobs"], f["attempts"], f["incidents"], f["exposure"])


def test_llama3_counts_give_shares_and_mean_time_between_interruptions(llama3: dict) -> None:
    assert llama3["unexpected"]["failures"] == 419
    assert round(100 * llama3["classes"]["faulty_gpu"]["share"], 1) == 35.3  # not the paper's printed 30.1
    assert round(100 * llama3["classes"]["gpu_hbm3_memory"]["share"], 1) == 17.2
    mtbf = 1.0 / llama3["unexpected"]["rates"]["job_hour"]["rate"]
    assert round(mtbf, 2) == 3.09
    assert llama3["planned"] == {"maintenance": {"count": 47, "per_job_hour": pytest.approx(47 / (54 * 24))}}
    # planned stops never enter a failure rate
    assert sum(c["failures"] for c in llama3["classes"].values()) == 419
    assert llama3["mtbf_vs_job_size"]["observed"][0]["mtbf_hours"] == pytest.approx(3.093, abs=1e-3)


def test_meta_projected_mttf_at_6_5_per_1000_node_days() -> None:
    per_node_hour = 6.5e-3 / 24
    assert round(fit.mtbf_hours(per_node_hour, "node_hour", 16384, 8), 2) == 1.80
    assert round(fit.mtbf_hours(per_node_hour, "node_hour", 131072, 8), 2) == 0.23
    # the same through a fit: 65 failures over 10,000 node-days, then the MTBF table
    f = one_job_fleet(["gpu_hardware"] * 65, days=10_000 / 16, gpus=128)
    doc = build_rates(f["jobs"], f["attempts"], f["incidents"], f["exposure"])
    assert doc["unexpected"]["per_1000_node_days"]["rate"] == pytest.approx(6.5)
    row = {r["gpus"]: r for r in doc["mtbf_vs_job_size"]["predicted"]}
    best = doc["classes"]["gpu_hardware"]["best_exposure"]
    if best != "job_hour":  # one job cannot tell the units apart; ties go to node-hours
        assert row[16384]["mtbf_hours"] == pytest.approx(1.80, abs=0.01)
        assert row[131072]["mtbf_hours"] == pytest.approx(0.2254, abs=0.001)
        assert row[16384]["lo"] < 1.80 < row[16384]["hi"]


def test_zero_failures_interval() -> None:
    rate, lo, hi = fit.poisson_interval(0, 1000.0)
    assert rate == 0 and lo == 0
    assert hi == pytest.approx(-math.log(0.025) / 1000.0)  # 3.689 / exposure


@settings(max_examples=60, deadline=None)
@given(mu=st.floats(min_value=0.0, max_value=150.0))
def test_exact_interval_covers_at_least_95_percent(mu: float) -> None:
    """Coverage computed exactly (sum of the Poisson pmf over the counts whose interval holds mu),
    zero failures included: the exact interval never undercovers."""
    ks = np.arange(0, int(mu + 12 * math.sqrt(mu + 1) + 20))
    _, lo, hi = fit.poisson_interval(ks, 1.0)
    covered = stats.poisson.pmf(ks, mu)[(lo <= mu) & (mu <= hi)].sum()
    assert covered >= 0.95 - 1e-9


@settings(max_examples=40, deadline=None)
@given(k=st.integers(0, 500), e=st.floats(1e-3, 1e7))
def test_interval_brackets_the_rate(k: int, e: float) -> None:
    rate, lo, hi = fit.poisson_interval(k, e)
    assert 0 <= lo <= rate <= hi
    assert (lo == 0) == (k == 0)


def test_weibull_recovers_shape_and_verdict() -> None:
    rng = np.random.default_rng(7)
    x = 50.0 * rng.weibull(0.6, 400)
    w = fit_weibull(x, 50.0 * rng.weibull(0.6, 40) * rng.uniform(size=40))
    assert w is not None and w.constant_rate_rejected and abs(w.shape / 0.6 - 1) < 0.1
    assert w.shape_lo < w.shape < w.shape_hi and w.scale_lo < w.scale < w.scale_hi
    e = fit_weibull(rng.exponential(10.0, 300), np.array([]))
    assert e is not None and not e.constant_rate_rejected and e.shape_lo < 1.0 < e.shape_hi
    assert e.mean_lo < 10.0 < e.mean_hi
    assert fit_weibull(np.array([1.0, 2.0]), np.array([5.0])) is None  # too few failures


def test_weibull_of_failures_all_the_same_time_apart_is_no_fit() -> None:
    """The shape's likelihood grows without bound (found by fuzzing the fleet command with runs
    copied from one another: scipy's bounded search was given a lower bound above its upper)."""
    assert fit_weibull(np.full(6, 5.0), np.array([1.0])) is None
    assert fit_weibull(np.full(6, 5.0), np.array([])) is None
    assert fit_weibull(np.array([5.0] * 5 + [5.000001]), np.array([2.0])) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-3, 1e4), min_size=3, max_size=30),
       st.lists(st.floats(1e-3, 1e4), max_size=10), st.integers(1, 4))
def test_weibull_fit_never_raises_and_brackets_its_shape(x: list[float], c: list[float], dup: int) -> None:
    w = fit_weibull(np.array(x * dup), np.array(c))
    if w is not None:
        assert 0 < w.shape_lo <= w.shape <= w.shape_hi
        assert w.mean_lo <= w.mean <= w.mean_hi


def test_best_exposure_tells_job_hours_from_node_hours() -> None:
    jobs = pl.DataFrame({"gpu_hour": [800.0, 8000.0, 80.0], "node_hour": [100.0, 1000.0, 10.0],
                         "job_hour": [100.0, 100.0, 10.0]})
    assert fit.best_exposure(np.array([10, 100, 1]), jobs)[0] in ("node_hour", "gpu_hour")
    assert fit.best_exposure(np.array([10, 10, 1]), jobs)[0] == "job_hour"


def test_scopes_add_up(llama3: dict) -> None:
    f = one_job_fleet(["a"] * 30 + ["b"] * 10, days=20, gpus=64, planned=5)
    fail = fit.failures(f["incidents"], f["exposure"])
    sc = fit.scope_rates(fail, fit.job_exposure(f["exposure"]), f["exposure"], window="1w")
    fleet = sc.filter(pl.col("scope") == "fleet").row(0, named=True)
    win = sc.filter(pl.col("scope") == "window")
    assert fleet["failures"] == 40 and win["failures"].sum() == 40
    assert win["job_hour"].sum() == pytest.approx(fleet["job_hour"])
    assert win.height == 3  # 20 days from Monday 1 January: three calendar weeks
    both = fit.all_scopes(fail, fit.job_exposure(f["exposure"]), f["exposure"])
    fl = both.filter(pl.col("scope") == "fleet")
    assert dict(zip(fl["failure_class"], fl["failures"], strict=True)) == {"all_unexpected": 40, "a": 30, "b": 10}
    rows = fit.scope_records(both)
    assert {r["scope"] for r in rows} == {"job_gpus", "window"} and len(rows) == 3 * (1 + 3)


def test_downtime_distributions() -> None:
    x = np.exp(np.random.default_rng(3).normal(math.log(300.0), 0.5, 500))
    d = fit.duration_summary(x)
    assert d is not None and d["n"] == 500
    assert d["lognormal"]["median_s"] == pytest.approx(300.0, rel=0.08)
    assert d["lognormal"]["sigma"] == pytest.approx(0.5, rel=0.1)
    assert fit.duration_summary(np.array([])) is None


def test_lemons_found_and_a_lone_failure_is_not_one() -> None:
    from dataclasses import replace

    from toranalyze.fleet.lemons import lemon_nodes
    from toranalyze.simulate.fleet_truth import FleetSpec, generate_fleet

    fr, truth = generate_fleet(replace(FleetSpec(), jobs=60, lemon_multiplier=150.0), 2)
    found = lemon_nodes(fr["incidents"], fr["exposure"])
    assert {x["node"] for x in found} == set(truth["lemons"])
    assert all(len(x["incidents"]) == x["failures"] and x["q_value"] < 0.05 for x in found)
    one = one_job_fleet(["gpu_hardware"], days=10, gpus=64)
    one["incidents"] = one["incidents"].with_columns(pl.lit(["n3"]).alias("nodes"))
    nodes = pl.concat([one["exposure"].with_columns(pl.lit(f"n{i}").alias("node"), pl.lit(8).alias("gpus"),
                                                    pl.lit(1).alias("nodes")) for i in range(8)])
    assert lemon_nodes(one["incidents"], nodes) == []


def test_a_relative_clock_falls_in_no_calendar_window() -> None:
    # An excerpt without timestamps runs on a clock from the Unix epoch: its hours are exposure,
    # but a week of 1969-12-29 in the rates' windows would be a date that never happened.
    exposure = pl.DataFrame({
        "run": ["excerpt", "real"], "job": ["1", "2"], "attempt": [0, 0],
        "t_start": [datetime(1970, 1, 1, tzinfo=UTC), datetime(2024, 3, 4, tzinfo=UTC)],
        "t_end": [datetime(1970, 1, 1, 1, tzinfo=UTC), datetime(2024, 3, 4, 5, tzinfo=UTC)],
        "gpus": [8, 8], "nodes": [1, 1],
    })
    fail = pl.DataFrame({"t_onset": [datetime(1970, 1, 1, 0, 30, tzinfo=UTC), datetime(2024, 3, 4, 2, tzinfo=UTC)]})
    w = fit.window_rates(fail, exposure)
    assert w.select("key", "failures", "node_hour").rows() == [("2024-03-04", 1, 5.0)]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40 * 86_400_000_000), st.integers(1, 9 * 86_400_000_000),
                          st.integers(1, 1024)), min_size=2, max_size=60),
       st.randoms(use_true_random=False))
def test_window_hours_are_exact_whatever_the_row_order(spans: list[tuple[int, int, int]], rnd: object) -> None:
    """Each attempt counts in the weeks it spans only, split at their edges, and a week's hours are
    the same bits whatever order the rows come in (a parallel float sum's order once moved
    rates.json in its sixth digit from one run to the next)."""
    t0 = datetime(2024, 6, 3, tzinfo=UTC)  # a Monday
    rows = [{"run": "r", "job": str(i), "attempt": 0, "t_start": t0 + timedelta(microseconds=s),
             "t_end": t0 + timedelta(microseconds=s + d), "gpus": g, "nodes": -(-g // 8)}
            for i, (s, d, g) in enumerate(spans)]
    exposure = pl.DataFrame(rows)
    fail = pl.DataFrame({"t_onset": [t0]})
    shuffled = rows[:]
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    w = fit.window_rates(fail, exposure)
    assert w.equals(fit.window_rates(fail, pl.DataFrame(shuffled)))
    total_h = sum(d for _, d, _ in spans) / 3.6e9
    assert math.isclose(w["job_hour"].sum(), total_h, rel_tol=1e-12)
    week = 7 * 86_400_000_000
    assert w.height == len({week_of for s, d, _ in spans for week_of in range(s // week, (s + d - 1) // week + 1)})
