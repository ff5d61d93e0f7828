"""Reconstruction accuracy against simulator truth (docs/ledger.md, toranalyze.score).

* direct: the simulator's timeline → the events perfect parsers would emit → analysis → score.
* end to end: ``toranalyze simulate`` logs → ``pipeline.ingest`` → analysis → score (skipped
  while the simulator cannot write logs yet).
The ``slow`` tests run the full acceptance over many seeds and presets.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from toranalyze.analysis import analyze_events
from toranalyze.score import events_from_timeline, score_run, summarize

HAS_SIM_CLI = importlib.util.find_spec("toranalyze.simulate.command") is not None


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
def test_end_to_end_small_runs(tmp_path):
    from toranalyze.pipeline import ingest

    jobs = []
    for seed in (0, 1):
        out = tmp_path / f"s{seed}"
        subprocess.run(
            [sys.executable, "-m", "toranalyze", "simulate", "--seed", str(seed), "--preset", "small", "--out",
             str(out)],
            check=True,
        )
        truth = json.loads((out / "truth.json").read_text())
        logs = [str(p) for p in sorted(out.iterdir()) if p.name != "truth.json"]
        jobs += score_run(analyze_events(ingest(logs).events), truth)
    _assert_acceptance(summarize(jobs))


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
    sys.path.insert(0, "benchmarks")
    import accuracy  # type: ignore[import-not-found]

    assert accuracy.main(["--mode", "e2e", "--runs", "52"]) == 0
