"""The planner: the exact renewal model, the Monte Carlo against it, rates.json as one source of
truth, scaling per class, exact intervals, extrapolation warnings and the CLI."""

from __future__ import annotations

import copy
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from toranalyze.cli import main
from toranalyze.errors import RatesError
from toranalyze.fleet.rates import build_rates, check_rates, dumps, load_rates, rates_schema
from toranalyze.model import daly_interval, tor_fail_stop_exact, young_interval
from toranalyze.plan import PlanOptions, plan
from toranalyze.plan.core import best_interval, job, tor_at
from toranalyze.plan.inputs import declared, garwood
from toranalyze.plan.montecarlo import Config, simulate
from toranalyze.plan.renewal import daly_complete, tor
from toranalyze.plan.strategy import Phase, Recovery, Strategy, Tier, named
from toranalyze.simulate.fleet_truth import FleetSpec, generate_fleet

H = 1.0 / 60.0  # a minute in hours


@pytest.fixture(scope="module")
def rates() -> dict:
    fr, _ = generate_fleet(replace(FleetSpec(), jobs=30), 11)
    return json.loads(dumps(build_rates(fr["jobs"], fr["attempts"], fr["incidents"], fr["exposure"])))


def _exponential(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    for c in doc["classes"].values():
        if c["weibull"]:
            c["weibull"]["constant_rate_rejected"] = False
    return doc


def test_one_blocking_tier_is_dalys_complete_model() -> None:
    # Daly (2006): M = 15 min, delta = 5 min, R = 10 min at his interval of 9.1 min. Failures may
    # strike the restart: 0.1997; the same time as downtime no failure can strike: 0.2333.
    M, d, R = 15 * H, 5 * H, 10 * H
    tau = daly_interval(d, M)
    s = Strategy("blocking", Tier(d))
    assert tor(s, tau, 1 / M, Recovery(Phase(0), Phase(0), Phase(R))) == pytest.approx(daly_complete(M, tau, d, R))
    assert round(tor(s, tau, 1 / M, Recovery(Phase(0), Phase(0), Phase(R))), 3) == 0.200
    assert tor(s, tau, 1 / M, Recovery(Phase(R), Phase(0), Phase(0))) == pytest.approx(
        tor_fail_stop_exact(M, tau, d, R))
    assert round(tor(s, tau, 1 / M, Recovery(Phase(R), Phase(0), Phase(0))), 3) == 0.233


def test_async_closed_form_counts_the_persist() -> None:
    """A failure during the background persist loses back to the save before: the commit lags by
    the persist p, so TOR = tau e^(-p/M) q / ((1 - q)(M + D)) with q = e^(-(tau + snapshot)/M)."""
    M, tau, snap, p, D = 3.0, 1.0, 20 / 3600, 0.2, 0.1
    q = math.exp(-(tau + snap) / M)
    want = tau * math.exp(-p / M) * q / ((1 - q) * (M + D))
    got = tor(Strategy("async", Tier(snap, p)), tau, 1 / M, Recovery(Phase(D), Phase(0), Phase(0)))
    assert got == pytest.approx(want, rel=1e-12)


def test_saves_and_restarts_of_zero_are_allowed() -> None:
    s = Strategy("blocking", Tier(0.0))
    assert tor(s, 1.0, 0.0, Recovery(Phase(0), Phase(0), Phase(0))) == 1.0
    assert 0 < tor(s, 0.5, 1 / 5, Recovery(Phase(0), Phase(0), Phase(0))) < 1


def _agreement_grid() -> list[tuple[str, float, float, Recovery]]:
    spread = Recovery(Phase(4 * H, 1.0), Phase(3 * H), Phase(8 * H, 0.6))
    fixed = Recovery(Phase(0), Phase(0), Phase(10 * H))
    return [(name, M, tau, rec) for name in ("blocking", "async", "memory", "multitier")
            for M, tau in ((0.5, 0.2), (4.0, 0.75)) for rec in (spread, fixed)]


@pytest.mark.parametrize(("name", "M", "tau", "rec"), _agreement_grid())
def test_monte_carlo_agrees_with_the_closed_form_within_three_standard_errors(name: str, M: float, tau: float,
                                                                             rec: Recovery) -> None:
    s = named(name, 5 * H, {"snapshot_h": 20 / 3600, "persist_h": 5 * H, "mem_save_h": 5 / 3600,
                            "mem_load_h": H, "every": 6, "survival": 0.85, "load_h": 2 * H})
    r = simulate([Config(s, tau, 1500.0, rec, (M,))], (1.0,), 300, seed=7, max_failures=5000)[0]
    cf = tor(s, tau, 1 / M, rec)
    assert abs(r.tor - cf) <= 3 * r.se, (r.tor, cf, r.se)


def test_several_classes_and_sizes_in_one_simulation() -> None:
    rec = Recovery(Phase(5 * H), Phase(0), Phase(5 * H))
    s = Strategy("blocking", Tier(3 * H))
    cfgs = [Config(s, tau, 1000.0, rec, (m1, m2)) for m1, m2, tau in ((4.0, 12.0, 0.5), (1.0, 3.0, 0.25))]
    for c, r in zip(cfgs, simulate(cfgs, (1.0, 1.0), 300, seed=3), strict=True):
        rate = sum(1 / m for m in c.means)
        assert abs(r.tor - tor(s, c.tau, rate, rec)) <= 3 * r.se


def test_the_best_interval_maximises_the_closed_form(rates: dict) -> None:
    j, _ = job(_exponential(rates), PlanOptions(gpus=512))
    s = j.strategy()
    best = best_interval(j, s, 512)
    assert tor_at(j, s, best, 512) >= max(tor_at(j, s, best * f, 512) for f in (0.8, 0.9, 1.1, 1.25))
    M = 1 / j.rate(512)
    assert best == pytest.approx(daly_interval(5 * H, M), rel=0.15)  # Daly's estimate is close
    assert young_interval(5 * H, M) > 0


def test_plan_answers_and_agrees(rates: dict) -> None:
    p = plan(_exponential(rates), PlanOptions(gpus=512, ideal_days=20, runs=200, compare=True))
    cf, mc = p["closed_form"], p["monte_carlo"]
    assert abs(mc["tor"] - cf["tor"]) <= 3 * mc["se"] + 1e-3
    assert cf["lo"] <= cf["tor"] <= cf["hi"]
    run = p["run"]
    assert 0 < run["p_any_failure"] <= 1 and run["expected_failures"] > 0
    assert set(run["lost_per_failure_h"]["closed_form"]) == {"detection", "queue", "restart", "rollback"}
    gh = run["gpu_hours"]
    assert gh["useful"] + gh["saves"] + gh["failures"] + gh["fail_slow"] == pytest.approx(gh["run"], rel=1e-6)
    assert p["mtbf"]["wall_h"] > p["mtbf"]["running_h"]  # wall time between failures holds the downtime
    assert {r["strategy"] for r in p["compare"]} == {"blocking", "async", "memory", "multitier"}
    assert {r["gpus"] for r in p["what_if"]} == {128, 256, 512, 1024, 2048}
    assert set(p["curves"]["interval"]) == {"blocking", "async", "memory", "multitier"}


def test_exact_poisson_interval_of_seven_failures() -> None:
    # the case: 7 failures; the exact interval of the rate is k x [0.402, 2.06] / k
    lo, hi = garwood(7, 1.0)
    assert (round(lo, 3), round(hi, 3)) == (2.814, 14.423)


def test_mtbf_interval_is_the_exact_poisson_one(rates: dict) -> None:
    p = plan(_exponential(rates), PlanOptions(gpus=256, runs=20))
    k = sum(c["failures"] for c in rates["classes"].values())
    lo, hi = garwood(k, 1.0)
    m = p["mtbf"]
    assert m["lo_h"] == pytest.approx(m["running_h"] * k / hi) and m["hi_h"] == pytest.approx(m["running_h"] * k / lo)


def test_one_source_of_truth_refuses_a_contradicting_rate(rates: dict) -> None:
    bad = copy.deepcopy(rates)
    name = next(iter(bad["classes"]))
    bad["classes"][name]["rates"]["node_hour"]["rate"] *= 10
    with pytest.raises(RatesError) as e:
        plan(bad, PlanOptions(gpus=64, runs=20))
    assert e.value.field == f"$.classes.{name}.rates.node_hour.rate" and "contradicts" in e.value.message
    bad = copy.deepcopy(rates)
    bad["classes"][name]["per_1000_node_days"]["rate"] = 1e6  # once ignored
    with pytest.raises(RatesError, match="contradicts"):
        plan(bad, PlanOptions(gpus=64, runs=20))


def test_failures_over_no_running_time_are_refused(rates: dict) -> None:
    bad = copy.deepcopy(rates)
    for k in ("gpu_hours", "node_hours", "job_hours", "node_days"):
        bad["exposure"][k] = 0.0
    for c in bad["classes"].values():
        for r in c["rates"].values():
            r.update(rate=None, exposure=0.0)
        c["per_1000_node_days"]["rate"] = None
    with pytest.raises(RatesError, match="no running time"):
        plan(bad, PlanOptions(gpus=64, runs=20))


def test_per_job_classes_are_not_scaled_with_size() -> None:
    j, _ = job({}, PlanOptions(gpus=64, gpus_per_node=8, rates=(declared("software=1/job-day"),
                                                                  declared("gpu_hardware=6.5/1000-node-days"))))
    assert j.rate(16384) - j.rate(64) == pytest.approx(6.5 / 24000 * (16384 - 64) / 8)


def test_software_failures_fitted_on_few_jobs_scale_per_job(rates: dict) -> None:
    doc = copy.deepcopy(rates)
    doc["classes"]["software"] = {**copy.deepcopy(doc["unexpected"]), "share": 0.1, "failures": doc["unexpected"]["failures"]}
    doc["classes"]["software"]["best_exposure"] = "node_hour"
    doc["classes"]["software"]["loglik"] = {"gpu_hour": -10.0, "node_hour": -10.0, "job_hour": -10.5}
    doc["classes"]["software"].pop("scaling", None)
    p = plan(doc, PlanOptions(gpus=64, runs=20))
    sw = next(c for c in p["inputs"]["classes"] if c["class"] == "software")
    assert sw["per"] == "job" and sw["scaling_source"] == "taxonomy" and "0.5" in sw["evidence"]


def test_extrapolation_is_said(rates: dict) -> None:
    p = plan(_exponential(rates), PlanOptions(gpus=16384 * 8, runs=20))
    said = [c for c in p["cautions"] if c.startswith("extrapolated")]
    assert said and "the largest job observed" in said[0]
    assert p["extrapolation"]["size_factor"] > 4


def test_no_failure_seen_gives_a_rule_of_three_bound() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fleet_fit"))
    from test_fit import one_job_fleet  # type: ignore[import-not-found]

    f = one_job_fleet([], days=3, gpus=64, planned=2)
    doc = check_rates(json.loads(dumps(build_rates(f["jobs"], f["attempts"], f["incidents"], f["exposure"]))))
    p = plan(doc, PlanOptions(gpus=64, ckpt_interval_h=2.0, runs=20))
    node_hours = 8 * 3 * 24.0  # 64 GPUs on 8 nodes for 3 days, no failure: the rate is below 3 / 576 per node-hour
    assert p["mtbf"]["running_h"] is None
    assert p["mtbf"]["lo_h"] == pytest.approx(node_hours / -math.log(0.05) / 8)
    assert p["closed_form"]["hi"] == pytest.approx(2.0 / (2.0 + 5 * H))
    assert 0 < p["closed_form"]["lo"] < p["closed_form"]["hi"]  # never "0.0000 - -"
    assert any("rule of three" in c for c in p["cautions"])


def test_fail_slow_is_shown_apart(rates: dict) -> None:
    base = plan(_exponential(rates), PlanOptions(gpus=256, runs=50))
    slow = plan(_exponential(rates), PlanOptions(gpus=256, runs=50, slow=((0.1, 2.0),)))
    assert slow["inputs"]["fail_slow"]["throughput_kept"] == pytest.approx(0.95)
    assert slow["run"]["loss"]["fail_slow"] > 0 and base["run"]["loss"]["fail_slow"] == 0
    assert slow["closed_form"]["tor"] < base["closed_form"]["tor"]


def test_weibull_classes_are_simulated_around_the_interval(rates: dict) -> None:
    doc = copy.deepcopy(rates)
    cls = max(doc["classes"], key=lambda c: doc["classes"][c]["failures"])
    per = doc["classes"][cls]["scaling"]["per"]
    doc["classes"][cls]["weibull"] = {**(doc["classes"][cls]["weibull"] or {}), "shape": 0.3,
                                      "constant_rate_rejected": True, "unit": f"{per}_hour"}
    p = plan(doc, PlanOptions(gpus=512, ideal_days=10, runs=200))
    assert len(p["simulated_intervals"]) == 4
    assert any(cls in r and "Weibull" in r for r in p["why_differ"]), p["why_differ"]


def test_rates_document_validates_and_carries_scaling(rates: dict) -> None:
    jsonschema.validate(rates, rates_schema())
    assert check_rates(rates) is rates
    assert all(c["scaling"]["per"] in ("gpu", "node", "job") for c in rates["classes"].values())
    assert 0 <= rates["fail_slow"]["loss_fraction"] <= 1


def test_bad_rates_name_the_field(rates: dict) -> None:
    bad = copy.deepcopy(rates)
    bad["exposure"].pop("gpu_hours")
    with pytest.raises(RatesError) as e:
        load_rates(json.dumps(bad), path="rates.json")
    assert "$.exposure.gpu_hours" in e.value.message and e.value.path == "rates.json"


def _run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(sys, "argv", ["toranalyze", *argv])
    try:
        main()
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_plan_cli(rates: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    good = tmp_path / "rates.json"
    good.write_text(dumps(rates))
    page = tmp_path / "plan.html"
    assert _run(["plan", "--rates", str(good), "--gpus", "256", "--runs", "40", "--ckpt-interval", "1h", "--json",
                 "--strategy", "async", "--html", str(page)], monkeypatch) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["inputs"]["strategy"]["interval_h"] == 1.0 and 0 < p["closed_form"]["tor"] < 1
    assert "plotly" in page.read_text()
    assert _run(["plan", "--rates", str(good), "--gpus", "8", "--ckpt-save", "0s", "--restart", "0s",
                 "--runs", "20"], monkeypatch) == 0
    assert "TOR closed form" in capsys.readouterr().out
    for argv in (["--ckpt-save", "soon"], ["--ckpt-interval", "0s"], ["--ckpt-interval", "1000000h"],
                 ["--rate", "gpu=1/fortnight"], ["--slow", "2,3"]):
        assert _run(["plan", "--rates", str(good), "--gpus", "8", *argv], monkeypatch) == 2, argv
    assert _run(["plan", "--gpus", "8"], monkeypatch) == 2  # neither --rates nor --rate
    assert _run(["plan", "--gpus", "1000000000", "--rate", "x=1/gpu-year"], monkeypatch) == 2


def test_declared_rates_in_published_units(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    assert _run(["plan", "--gpus", "16384", "--rate", "hardware=6.5/1000-node-days", "--runs", "20", "--json"],
                monkeypatch) == 0
    p = json.loads(capsys.readouterr().out)
    assert round(p["mtbf"]["running_h"], 2) == 1.80  # Meta's projected MTTF at 16,384 GPUs (see test_published)


def test_absurd_documents_are_refused_by_field(rates: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    zero = copy.deepcopy(rates)
    zero["gpus_per_node"] = 0  # once silently 8
    f = tmp_path / "zero.json"
    f.write_text(json.dumps(zero))
    assert _run(["plan", "--rates", str(f), "--gpus", "64"], monkeypatch) == 2
    assert "gpus_per_node" in capsys.readouterr().err
    assert _run(["plan", "--rates", str(f), "--gpus", "64", "--gpus-per-node", "8", "--runs", "10"], monkeypatch) == 0


def test_compare_prints_the_four_strategies(rates: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture) -> None:
    f = tmp_path / "rates.json"
    f.write_text(dumps(rates))
    assert _run(["plan", "--rates", str(f), "--gpus", "1024", "--compare", "--runs", "20"], monkeypatch) == 0
    text = capsys.readouterr().out
    assert all(s in text for s in ("blocking", "async", "memory", "multitier", "what if"))


@pytest.mark.parametrize("survival", [0.0, 0.9, 1.0])
def test_ten_saves_a_cycle_with_a_persist_longer_than_the_interval(survival: float) -> None:
    """Ten peer-memory saves a durable one, the background write (5 min) longer than the interval
    (3 min): the save positions are counted from the gap itself (a difference of save offsets
    once lost a save to rounding at the end of the ninth, and the Monte Carlo fell 11 standard
    errors short)."""
    s = Strategy("memory", Tier(5 / 3600, 5 * H), Tier(5 / 3600, 0.0, H), 10, survival)
    rec = Recovery(Phase(0.1), Phase(0), Phase(0.02))
    r = simulate([Config(s, 3 * H, 1000.0, rec, (0.25,))], (1.0,), 200, seed=1, max_failures=50_000)[0]
    assert abs(r.tor - tor(s, 3 * H, 4.0, rec)) <= 3 * r.se


def test_a_hopeless_plan_says_so_instead_of_printing_absurd_numbers(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture) -> None:
    # a failure every few seconds of running: no interval lets a 5-minute save complete
    p = _plan_declared(16384, "hw=1000/node-day", compare=True)
    assert p["run"]["expected_failures"] is None and p["run"]["wall_days"] is None
    assert p["inputs"]["strategy"]["interval_source"].startswith("none makes progress")
    assert any("fail more often than it can save" in c for c in p["cautions"])
    assert _run(["plan", "--gpus", "16384", "--rate", "hw=1000/node-day", "--runs", "10"], monkeypatch) == 0
    assert "practically never finish" in capsys.readouterr().out


def _plan_declared(gpus: int, rate: str, **kw: object) -> dict:
    return plan({}, PlanOptions(gpus=gpus, rates=(declared(rate),), runs=10, **kw))  # type: ignore[arg-type]
