"""Reconstruction accuracy against simulator truth (docs/ledger.md, toranalyze.simulate.score).

* direct: the simulator's timeline → the events perfect parsers would emit → analysis → score.
* end to end: simulated logs → ``pipeline.ingest`` (the real parsers) → analysis → score, on the
  compact scenarios of ``benchmarks/accuracy.py``.

The default run scores a few small runs; the ``slow`` tests (run by CI) hold the acceptance
bounds over 54 end-to-end runs of every scenario and 60 direct runs of the presets.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from toranalyze.reconstruct.analysis import analyze_events
from toranalyze.simulate.score import events_from_timeline, score_run, summarize

HAS_SIM_CLI = importlib.util.find_spec("toranalyze.simulate.command") is not None
BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _bench():
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    import accuracy  # type: ignore[import-not-found]

    return accuracy


def _direct(preset: str, seed: int) -> list[dict]:
    from toranalyze.model import config_from_dict, load_preset
    from toranalyze.simulate.timeline import simulate_timeline
    from toranalyze.simulate.truth import job_truth

    tl = simulate_timeline(config_from_dict(load_preset(preset)), seed=seed)
    return score_run(analyze_events(events_from_timeline(tl)), {"jobs": [job_truth(tl)]})


def _assert_acceptance(s: dict) -> None:
    assert s["ledger_sums_exact"]
    assert s["tor_abs_err_median"] <= 0.005 and s["tor_abs_err_max"] <= 0.02, s
    assert s["incident_count_exact_share"] >= 0.95, s
    assert s["root_cause_accuracy"] >= 0.95, s["confusions"]
    assert all(v is None or v <= 60 for v in s["phase_median_err_s"].values()), s["phase_median_err_s"]
    if s["lost_steps_exact_share"] is not None:
        assert s["lost_steps_exact_share"] == 1.0
    if s["slow_recall"] is not None:
        assert s["slow_recall"] >= 0.90 and s["slow_factor_within_10pct_share"] == 1.0
    assert s["slow_false_per_run"] <= 0.1


def test_direct_small_runs_meet_acceptance():
    jobs = []
    for seed in (0, 1, 2):
        jobs += _direct("small", seed)
    _assert_acceptance(summarize(jobs))


@pytest.mark.skipif(not HAS_SIM_CLI, reason="the simulator does not write logs yet")
def test_end_to_end_compact_runs(tmp_path):
    """Two compact runs through the real parsers: TOR within 0.005 each (no systematic bias),
    every incident found with its root cause and exact lost steps."""
    s, jobs, _ = _bench().evaluate(["compact", "compact-requeue"], 2, keep=tmp_path)
    _assert_acceptance(s)
    assert all(j["tor_abs_err"] <= 0.005 for j in jobs), [j["tor_abs_err"] for j in jobs]
    assert s["incidents_true"] >= 4


@pytest.mark.slow
def test_direct_full_acceptance_many_seeds_and_presets():
    jobs = []
    presets = ("small", "llama3-like", "fleet", "exp-closed-form")
    for k in range(60):
        jobs += _direct(presets[k % 4], k // 4)
    _assert_acceptance(summarize(jobs))


@pytest.mark.slow
@pytest.mark.skipif(not HAS_SIM_CLI, reason="the simulator does not write logs yet")
def test_end_to_end_full_acceptance():
    """54 runs over every scenario (all failure classes, fail-slow, planned stops, hangs,
    rollbacks, requeue and new-id attempts, logging intervals, fleets, closed form; the
    Kubernetes flavour when the simulator writes it) through the real parsers."""
    s, jobs, notes = _bench().evaluate(_bench().DEFAULT_SCENARIOS.split(","), 54)
    assert len({j["preset"] + str(j["seed"]) for j in jobs}) == 54
    _assert_acceptance(s)
