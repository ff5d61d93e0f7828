"""Closed forms of the TOR model against the worked values of the reference."""

from __future__ import annotations

import math

import pytest

from toranalyze.model import (
    availability_optimal_interval,
    config_from_dict,
    daly_interval,
    load_preset,
    parse_duration,
    preset_names,
    tor_fail_slow_first_order,
    tor_fail_stop_exact,
    tor_first_order,
    young_interval,
)


@pytest.mark.parametrize(
    "M,tau,delta,R,want",
    [(180, 30, 1, 10, 0.8401), (1440, 60, 5, 30, 0.8840), (600, 20, 0.5, 5, 0.9511), (60, 30, 2, 10, 0.6082)],
)
def test_fail_stop_exact_worked_values(M, tau, delta, R, want):
    assert round(tor_fail_stop_exact(M, tau, delta, R), 4) == want


@pytest.mark.parametrize("M,tau,delta,R,want", [(180, 30, 1, 10, 0.8379), (60, 30, 2, 10, 0.5893)])
def test_first_order_worked_values(M, tau, delta, R, want):
    assert round(tor_first_order(M, tau, delta, R), 4) == want


def test_fail_slow_first_order_worked_value():
    assert round(tor_fail_slow_first_order(600, 30, 1, 72, 1 / 1.34, 0), 4) == 0.9412


@pytest.mark.parametrize("M_h,want", [(24, 117), (6, 57)])
def test_daly_published_values(M_h, want):
    assert round(daly_interval(5, M_h * 60)) == want


def test_daly_short_mtbf():
    assert round(daly_interval(5, 15), 1) == 9.1
    assert daly_interval(40, 15) == 15  # delta >= 2M -> tau = M


def test_young_and_availability():
    assert young_interval(5, 1440) == pytest.approx(math.sqrt(2 * 5 * 1440))
    t = availability_optimal_interval(1.0, 10.0, 5.0)
    assert t == pytest.approx(1.0 + math.sqrt(2 * 15 * 1 + 1))
    assert availability_optimal_interval(1.0, 10.0, 5.0, detection=30.0) == 30.0


def test_exact_converges_to_first_order_for_large_mtbf():
    assert tor_fail_stop_exact(1e6, 30, 1, 10) == pytest.approx(tor_first_order(1e6, 30, 1, 10), abs=1e-5)
    assert tor_fail_stop_exact(math.inf, 30, 1, 10) == pytest.approx(30 / 31)


def test_durations():
    assert parse_duration("2d") == 172800
    assert parse_duration("90m") == 5400
    assert parse_duration("1.5h") == 5400
    assert parse_duration(12) == 12.0
    with pytest.raises(ValueError):
        parse_duration("soon")


def test_presets_load():
    names = preset_names()
    for want in ("small", "llama3-like", "fleet", "exp-closed-form"):
        assert want in names
    for n in names:
        cfg = config_from_dict(load_preset(n))
        assert cfg.train_iters >= 1


def test_llama3_preset_mix_sums_to_the_report():
    data = load_preset("llama3-like")
    total = sum(v["rate"] for k, v in data["failures"].items() if v["per"] == "gpu_hour")
    # 419 unexpected interruptions in 54 days on 16,384 GPUs
    assert total * 54 * 24 * 16384 == pytest.approx(419, rel=2e-3)


def test_unknown_class_rejected():
    with pytest.raises(ValueError):
        config_from_dict({"failures": {"cosmic_rays": {"rate": 1.0}}})
