"""Fail-slow detection against the job's own baseline."""

from __future__ import annotations

import numpy as np
import pytest

from toranalyze.reconstruct.analysis import analyze_events, events_frame


def _run(durs, extra=()):
    t = 0.0
    rec = [dict(ts=0, kind="init", file="r/t")]
    for i, d in enumerate(durs, 1):
        t += d
        rec.append(dict(ts=t, kind="step", step=i, step_time_s=float(d), file="r/t"))
    return analyze_events(events_frame(rec + list(extra)))


def test_sustained_slowdown_is_found_with_its_factor_and_spikes_are_not():
    rng = np.random.default_rng(1)
    d = 10 * rng.lognormal(0, 0.02, 600)
    d[[50, 51, 300]] *= 3.0  # single spikes
    d[200:260] *= 1.3
    an = _run(d)
    sp = an.slow_periods
    assert sp.height == 1
    row = sp.row(0, named=True)
    assert 195 <= row["first_step"] <= 206 and 255 <= row["last_step"] <= 266
    assert row["factor"] == pytest.approx(1.3, rel=0.03)
    assert row["slowdown_s"] > 0


def test_mild_long_straggler_found_but_not_noise():
    rng = np.random.default_rng(2)
    d = 10 * rng.lognormal(0, 0.02, 2000)
    assert _run(d).slow_periods.height == 0
    d[800:1200] *= 1.06
    sp = _run(d).slow_periods
    assert sp.height == 1 and sp["factor"][0] == pytest.approx(1.06, rel=0.02)


def test_suspect_node_from_warnings_in_period():
    rng = np.random.default_rng(3)
    d = 10 * rng.lognormal(0, 0.01, 300)
    d[100:160] *= 1.5
    start = float(np.cumsum(d)[110])
    warn = [dict(ts=start + k, kind="warning", node="gpu-007", failure_class="fail_slow", file="r/kern") for k in range(3)]
    noise = [dict(ts=5.0, kind="warning", node="gpu-001", file="r/kern")]
    sp = _run(d, warn + noise).slow_periods
    assert sp["node"].to_list() == ["gpu-007"]
    assert sp["evidence"][0].len() >= 1


def test_warmup_after_restart_is_not_a_slow_period():
    d = [20.0, 15.0, 12.0] + [10.0] * 100
    assert _run(d).slow_periods.height == 0


def test_slow_period_in_rows_of_ten_steps():
    """Windows count steps: with a line every 10 steps, 12 slow rows (120 steps) are a period."""
    rng = np.random.default_rng(4)
    d = 5 * rng.lognormal(0, 0.02, 1000)
    d[400:520] *= 1.3
    t = 0.0
    rec = [dict(ts=0, kind="init", file="r/t")]
    for i in range(10, 1001, 10):
        t += float(d[i - 10:i].sum())
        rec.append(dict(ts=t, kind="step", step=i, step_time_s=float(d[i - 10:i].mean()), file="r/t"))
    sp = analyze_events(events_frame(rec)).slow_periods
    assert sp.height == 1
    row = sp.row(0, named=True)
    assert 395 <= row["first_step"] <= 420 and 510 <= row["last_step"] <= 530
    assert row["factor"] == pytest.approx(1.3, rel=0.03)
