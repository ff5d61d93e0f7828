"""The planner: checkpoint formulas, closed form against Monte Carlo, rates.json checks and the CLI."""

from __future__ import annotations

import copy
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from toranalyze.cli import main
from toranalyze.errors import RatesError
from toranalyze.fleet.rates import build_rates, check_rates, dumps, load_rates, rates_schema
from toranalyze.model import daly_interval, tor_fail_stop_exact, young_interval
from toranalyze.plan.core import PlanOptions, plan
from toranalyze.plan.montecarlo import Process, Repair, Schedule, simulate_tor
from toranalyze.simulate.fleet_truth import FleetSpec, generate_fleet


@pytest.fixture(scope="module")
def rates() -> dict:
    spec = replace(FleetSpec(), jobs=30)
    fr, _ = generate_fleet(spec, 11)
    return json.loads(dumps(build_rates(fr["jobs"], fr["attempts"], fr["incidents"], fr["exposure"])))


def test_daly_published_intervals() -> None:
    # Daly (2006), delta = 5 min: M = 24 h -> 117 min, 6 h -> 57 min, 15 min -> 9.1 min
    assert round(daly_interval(5, 24 * 60)) == 117
    assert round(daly_interval(5, 6 * 60)) == 57
    assert round(daly_interval(5, 15), 1) == 9.1
    assert young_interval(5, 24 * 60) == pytest.approx(120.0)


@pytest.mark.parametrize(("M", "tau", "delta", "R"), [(180, 30, 1, 10), (600, 20, 0.5, 5), (60, 30, 2, 10)])
def test_monte_carlo_matches_the_exact_closed_form(M: float, tau: float, delta: float, R: float) -> None:
    x = simulate_tor([Process("all", M / 60)], Repair(R / 60), Schedule(30 * 24, tau / 60, delta / 60), 300, seed=5)
    assert x.mean() == pytest.approx(tor_fail_stop_exact(M, tau, delta, R), rel=0.01)


def test_repair_spread_does_not_move_the_mean() -> None:
    p = [Process("all", 3.0)]
    fixed = simulate_tor(p, Repair(0.2), Schedule(720, 0.5, 1 / 60), 300, seed=1).mean()
    spread = simulate_tor(p, Repair(0.2, 1.0), Schedule(720, 0.5, 1 / 60), 300, seed=1).mean()
    assert spread == pytest.approx(fixed, abs=0.004)


def test_rates_document_validates(rates: dict) -> None:
    jsonschema.validate(rates, rates_schema())
    assert check_rates(rates) is rates
    assert dumps(rates) == dumps(json.loads(dumps(rates)))  # deterministic text


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(schema_version=2), "schema_version"),
        (lambda d: d["exposure"].pop("gpu_hours"), "$.exposure.gpu_hours"),
        (lambda d: d["unexpected"]["rates"]["gpu_hour"].update(rate=-1.0), "$.unexpected.rates.gpu_hour.rate"),
        (lambda d: next(iter(d["classes"].values())).update(best_exposure="per_week"), "best_exposure"),
    ],
)
def test_bad_rates_name_the_field(rates: dict, mutate, field: str) -> None:
    bad = copy.deepcopy(rates)
    mutate(bad)
    with pytest.raises(RatesError) as e:
        load_rates(json.dumps(bad), path="rates.json")
    assert field in e.value.message and e.value.path == "rates.json"
    with pytest.raises(jsonschema.ValidationError):  # the shipped schema says the same to other readers
        jsonschema.validate(bad, rates_schema())


def test_plan_agrees_and_recommends(rates: dict) -> None:
    doc = copy.deepcopy(rates)
    for c in doc["classes"].values():  # exponential world: the closed form's assumptions hold
        if c["weibull"]:
            c["weibull"]["constant_rate_rejected"] = False
    p = plan(doc, PlanOptions(gpus=512, ckpt_save_h=5 / 60, restart_h=0.25, ideal_days=20, runs=200))
    assert p["monte_carlo"]["tor"] == pytest.approx(p["closed_form"]["tor"], rel=0.01)
    assert p["closed_form"]["lo"] <= p["closed_form"]["tor"] <= p["closed_form"]["hi"]
    iv = p["intervals"]
    assert iv["daly_h"] == pytest.approx(daly_interval(5 / 60, p["inputs"]["mtbf_h"]))
    assert iv["optimum"]["gain_over_daly"]["lo"] < 0.005  # Daly is (near) optimal for exponential failures
    assert {r["gpus"] for r in p["what_if"]} == {128, 256, 512, 1024, 2048}
    assert math.isfinite(p["monte_carlo"]["se"])


def _run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(sys, "argv", ["toranalyze", *argv])
    with pytest.raises(SystemExit) as e:
        main()
    return int(e.value.code or 0)


def test_plan_cli(rates: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    good = tmp_path / "rates.json"
    good.write_text(dumps(rates))
    monkeypatch.setattr(sys, "argv", ["toranalyze", "plan", "--rates", str(good), "--gpus", "256", "--runs", "40",
                                      "--ckpt-interval", "1h", "--json"])
    main()
    p = json.loads(capsys.readouterr().out)
    assert p["inputs"]["ckpt_interval_h"] == 1.0 and 0 < p["closed_form"]["tor"] < 1
    bad = copy.deepcopy(rates)
    bad["unexpected"]["rates"]["job_hour"]["rate"] = -0.5
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert _run(["plan", "--rates", str(tmp_path / "bad.json"), "--gpus", "8"], monkeypatch) == 2
    assert "unexpected.rates.job_hour.rate" in capsys.readouterr().err
    (tmp_path / "v2.json").write_text(json.dumps({**rates, "schema_version": 2}))
    assert _run(["plan", "--rates", str(tmp_path / "v2.json"), "--gpus", "8"], monkeypatch) == 2
    assert "schema_version" in capsys.readouterr().err
    assert _run(["plan", "--rates", str(good), "--gpus", "8", "--ckpt-save", "soon"], monkeypatch) == 2


def test_why_differ_names_the_weibull_class(rates: dict) -> None:
    doc = copy.deepcopy(rates)
    cls = max(doc["classes"], key=lambda c: doc["classes"][c]["failures"])
    doc["classes"][cls]["weibull"] = {**(doc["classes"][cls]["weibull"] or {}), "shape": 0.3,
                                      "constant_rate_rejected": True}
    p = plan(doc, PlanOptions(gpus=512, ckpt_save_h=5 / 60, restart_h=0.25, ideal_days=10, runs=200))
    assert any(cls in r and "Weibull" in r for r in p["why_differ"]), p["why_differ"]
    assert abs(p["monte_carlo"]["tor"] - p["closed_form"]["tor"]) > 2 * p["monte_carlo"]["se"]


def test_write_rates_only_when_changed(rates: dict, tmp_path: Path) -> None:
    from toranalyze.fleet.store import write_text

    fr, _ = generate_fleet(replace(FleetSpec(), jobs=10), 5)
    path = tmp_path / "rates.json"
    text = dumps(build_rates(fr["jobs"], fr["attempts"], fr["incidents"], fr["exposure"]))
    assert write_text(text, path) and not write_text(text, path)
    check_rates(json.loads(path.read_text()))
    assert not list(tmp_path.glob(".rates.json.*"))  # no temporary left behind


def test_plan_with_no_failure_seen() -> None:
    import sys as _sys

    _sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fleet_fit"))
    from test_fit import one_job_fleet  # type: ignore[import-not-found]

    f = one_job_fleet([], days=3, gpus=64, planned=2)
    doc = check_rates(json.loads(dumps(build_rates(f["jobs"], f["attempts"], f["incidents"], f["exposure"]))))
    p = plan(doc, PlanOptions(gpus=64, ckpt_interval_h=2.0, runs=20))
    assert p["inputs"]["mtbf_h"] is None and p["inputs"]["mtbf_lo_h"] > 0  # the rate's upper bound still bites
    assert p["closed_form"]["tor"] == pytest.approx(2.0 / (2.0 + 5 / 60))
    assert p["monte_carlo"]["tor"] == pytest.approx(p["closed_form"]["tor"], rel=1e-3)


def test_monte_carlo_bounds_hopeless_plans_and_keeps_their_ratio() -> None:
    """Failures every 3 minutes over a month of work: the simulation stops at its failure budget
    and scores runs by the ratio so far, which matches the exact closed form; an interval that can
    never complete scores zero."""
    from toranalyze.model import tor_fail_stop_exact
    from toranalyze.plan.montecarlo import Process, Repair, Schedule, simulate_tor

    M, delta, R = 0.05, 0.005, 0.01
    tau = math.sqrt(2 * delta * M)
    tor = simulate_tor([Process("x", M)], Repair(R), Schedule(720.0, tau, delta), runs=50, seed=3)
    assert tor.mean() == pytest.approx(tor_fail_stop_exact(M, tau, delta, R), rel=0.02)
    never = simulate_tor([Process("x", M)], Repair(R), Schedule(720.0, tau=2.0, delta=delta), runs=5, seed=3)
    assert (never < 1e-3).all()


def test_cautions_name_thin_rates_and_failures_faster_than_a_save(rates: dict) -> None:
    assert plan(rates, PlanOptions(gpus=64, runs=20))["cautions"] == []
    thin = copy.deepcopy(rates)
    thin["exposure"].update(node_hours=1e-6, job_hours=0.05)
    said = plan(thin, PlanOptions(gpus=64, runs=20))["cautions"]
    assert len(said) == 1 and "180 s of running time" in said[0]
    m = plan(rates, PlanOptions(gpus=4096, runs=20))["inputs"]["mtbf_h"]
    said = plan(rates, PlanOptions(gpus=4096, ckpt_save_h=2 * m, runs=20))["cautions"]
    assert any("fail more often than it can save" in c for c in said)


def test_the_interval_grid_stays_positive_for_microsecond_intervals() -> None:
    from toranalyze.plan.core import interval_grid

    normal = interval_grid(1.5)
    assert len(normal) == 25 and normal[0] == pytest.approx(0.375) and normal[-1] == pytest.approx(6.0)
    assert (normal == np.round(normal, 9)).all()  # as before: rounded to the nanohour
    tiny = interval_grid(3e-11)
    assert len(tiny) == 25 and (tiny > 0).all() and tiny[0] == pytest.approx(7.5e-12)


@pytest.mark.slow  # every simulated run fails until the failure cap: about 30 s
def test_failures_every_few_microseconds_plan_without_a_division_by_zero(rates: dict) -> None:
    # A rates file written from a pasted excerpt can imply a failure every microsecond: the
    # interval grid must not round such intervals to 0 (numpy warned of a division by zero and
    # the warning corrupted `plan --json` read from a captured output).
    import warnings

    frantic = copy.deepcopy(rates)
    for c in frantic["classes"].values():
        for r in c["rates"].values():  # the same failures over a trillionth of the running time
            r["exposure"] = r["exposure"] / 1e12
            r["rate"] = r["rate"] * 1e12 if r.get("rate") else r.get("rate")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = plan(frantic, PlanOptions(gpus=1024, runs=20))
    assert p["intervals"]["optimum"]["tau_h"] > 0 and p["closed_form"]["tor"] < 1e-3
    assert any("fail more often than it can save" in c for c in p["cautions"])
