"""Progress curve: rollbacks, lost steps, checkpoints, evaluations, logging intervals."""

from __future__ import annotations

import pytest

from toranalyze.reconstruct.analysis import AnalysisOptions, analyze_events, events_frame


def _steps(t0, s0, s1, dt=10.0, rep=True, every=1, f="r/t"):
    out = []
    for s in range(s0, s1 + 1):
        if (s - s0 + 1) % every == 0:
            out.append(dict(ts=t0 + (s - s0 + 1) * dt, kind="step", step=s, step_time_s=dt if rep else None, file=f))
    return out


def test_rollback_gives_lost_steps_and_rework():
    rec = [dict(ts=0, kind="job_start", job_id="1", file="r/s")] + _steps(0, 1, 30)
    rec += [dict(ts=301, kind="job_end", job_id="1", state="FAILED", file="r/s")]
    rec += [dict(ts=400, kind="job_start", job_id="2", file="r/s"), dict(ts=420, kind="ckpt_load", step=20, file="r/t")]
    rec += _steps(420, 21, 40)
    rec += [dict(ts=621, kind="job_end", job_id="2", state="COMPLETED", file="r/s")]
    an = analyze_events(events_frame(rec))
    t = an.tor.row(0, named=True)
    assert t["rework_us"] == 10 * 10_000_000
    assert t["steps_lost"] == 10 and t["steps_preserved"] == 40
    inc = an.incidents.row(0, named=True)
    assert inc["lost_steps"] == 10 and inc["lost_time_s"] == pytest.approx(100.0)
    assert an.attempts["steps_lost"].to_list() == [10, 0]


def test_resume_without_ckpt_load_uses_first_step_minus_one():
    rec = [dict(ts=0, kind="init", file="r/t")] + _steps(0, 1, 10)
    rec += [dict(ts=200, kind="init", file="r/t")] + _steps(200, 6, 12)
    an = analyze_events(events_frame(rec))
    assert an.attempts["resumed_from"].to_list() == [0, 5]
    assert an.incidents["lost_steps"].to_list() == [5]


def test_checkpoint_begin_end_pair_and_lone_lines():
    rec = [dict(ts=0, kind="init", file="r/t")] + _steps(0, 1, 10)
    rec += [dict(ts=101, kind="ckpt_save_begin", step=10, file="r/t"), dict(ts=109, kind="ckpt_save_end", step=10, file="r/t")]
    rec += _steps(109, 11, 20)
    # lone end line with a duration
    rec += [dict(ts=214, kind="ckpt_save_end", step=20, duration_s=5.0, file="r/t")]
    rec += _steps(214, 21, 30)
    # lone end line, no duration: spans from the last step's end
    rec += [dict(ts=320, kind="ckpt_save_end", step=30, file="r/t")]
    rec += _steps(320, 31, 40)
    an = analyze_events(events_frame(rec))
    assert an.tor["checkpoint_s"][0] == pytest.approx(8 + 5 + 6)  # 214-209 = 5 unattributed -> other


def test_spike_inferred_checkpoint_from_lone_begin():
    rec = [dict(ts=0, kind="init", file="r/t")] + _steps(0, 1, 10)
    rec += [dict(ts=100, kind="ckpt_save_begin", step=10, file="r/t")]
    rec += _steps(112, 11, 20)  # the next step ends at 122: 12 s of saving before its 10 s of compute
    an = analyze_events(events_frame(rec))
    assert an.tor["checkpoint_s"][0] == pytest.approx(12.0)


def test_eval_goes_to_other_and_logging_interval_rows():
    rec = [dict(ts=0, kind="init", file="r/t")] + _steps(0, 1, 50, rep=False, every=5)
    rec += [dict(ts=500, kind="eval_begin", file="r/t"), dict(ts=530, kind="eval_end", file="r/t")]
    rec += _steps(530, 51, 100, rep=False, every=5)
    an = analyze_events(events_frame(rec))
    t = an.tor.row(0, named=True)
    assert t["eval_s"] == pytest.approx(30.0)
    assert t["ideal_step_time_s"] == pytest.approx(10.0)
    assert t["steps_preserved"] == 100
    assert t["useful_s"] == pytest.approx(1000.0)


def _coarse_run(seed=0, n=300, every=1, save_at=(100, 200), eval_at=(200,)):
    """Steps of ~5 s (jitter 2 %) reported to 0.1 ms, stamped to the second (truncated) like
    Megatron; saves of ~20 s, evaluations of 30 s without a timestamp of their own."""
    import math

    import numpy as np

    rng = np.random.default_rng(seed)
    t = 100.0 + rng.uniform(0, 1)
    rec = [dict(ts=100, kind="job_start", job_id="1", file="r/s"), dict(ts=float(int(t)), kind="init", file="r/t")]
    exact = []
    acc, k = 0.0, 0
    for s in range(1, n + 1):
        d = 5.0 * float(rng.lognormal(0, 0.02))
        t += d
        acc, k = acc + d, k + 1
        exact.append(d)
        if s % every == 0:
            rec.append(dict(ts=float(math.floor(t)), kind="step", step=s, step_time_s=round(acc / k, 4), file="r/t"))
            acc, k = 0.0, 0
        if s in save_at:
            rec.append(dict(ts=float(math.floor(t)), kind="ckpt_save_begin", step=s, file="r/t"))
            t += 20.0 + rng.uniform(-2, 2)
            rec.append(dict(ts=float(math.floor(t)), kind="ckpt_save_end", step=s, file="r/t"))
        if s in eval_at:
            rec.append(dict(ts=float(math.floor(t)), ts_inferred=True, kind="eval_end", step=s, file="r/t"))
            t += 30.0
    rec.append(dict(ts=float(math.floor(t + 10)), kind="job_end", job_id="1", state="COMPLETED", file="r/s"))
    return rec, exact


def test_second_resolution_stamps_are_sharpened_by_the_reported_step_times():
    """Truncated stamps used as step ends moved ~0.1 s per step from steps to `other`; chained
    on the reported times the steps are contiguous and exactly as long as reported."""
    rec, exact = _coarse_run()
    an = analyze_events(events_frame(rec), AnalysisOptions(ideal_step_time_s=5.0))
    t = an.tor.row(0, named=True)
    useful = sum(min(d, 5.0) for d in exact)
    slow = sum(max(d - 5.0, 0.0) for d in exact)
    assert t["useful_s"] == pytest.approx(useful, abs=0.5)
    assert t["slowdown_s"] == pytest.approx(slow, abs=0.5)
    assert t["checkpoint_s"] == pytest.approx(40.0, abs=4.5)  # two saves of 20 +- 2 s
    assert t["eval_s"] == pytest.approx(30.0, abs=1.5)  # the block placed at the save's end time


def test_rows_averaging_several_steps_count_their_jitter_above_t_star():
    """A line every 10 steps hides single steps; useful time is still per step (min(d, t*)), so
    the spread of the steps inside a row is estimated from the job's own rows."""
    rec, exact = _coarse_run(seed=3, n=600, every=10, save_at=(200, 400), eval_at=())
    an = analyze_events(events_frame(rec), AnalysisOptions(ideal_step_time_s=5.0))
    t = an.tor.row(0, named=True)
    slow = sum(max(d - 5.0, 0.0) for d in exact)
    assert slow > 20  # the jitter alone: about 0.04 s a step
    assert t["slowdown_s"] == pytest.approx(slow, rel=0.25)
    assert t["useful_s"] + t["slowdown_s"] == pytest.approx(sum(exact), abs=1.0)
