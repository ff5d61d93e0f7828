"""Incidents: grouping, root cause by causal priority, special rules, phases."""

from __future__ import annotations

import pytest

from toranalyze.analysis import analyze_events, events_frame


def _attempt(t0, s0, s1, job, state, dt=10.0, end_gap=10.0, load=None):
    rec = [dict(ts=t0, kind="job_start", job_id=job, file="r/sacct")]
    if load is not None:
        rec.append(dict(ts=t0 + 5, kind="ckpt_load", step=load, file="r/train"))
    t = t0 + 5
    for s in range(s0, s1 + 1):
        t += dt
        rec.append(dict(ts=t, kind="step", step=s, step_time_s=dt, file="r/train"))
    end = t + end_gap
    rec.append(dict(ts=end, kind="job_end", job_id=job, state=state, file="r/sacct"))
    return rec, t, end


def test_xid_plus_timeouts_on_all_ranks_is_one_gpu_hardware_incident():
    a, t_last, end = _attempt(0, 1, 20, "1", "FAILED", end_gap=700)
    errs = [dict(ts=t_last + 20, kind="error", code="79", node="n7", gpu=3, failure_class="gpu_hardware", file="r/kern")]
    errs += [dict(ts=t_last + 620, kind="error", rank=r, node=f"n{r // 8}", failure_class="collective_timeout",
                  file="r/train") for r in range(512)]
    b, _, _ = _attempt(end + 100, 11, 30, "2", "COMPLETED", load=10)
    an = analyze_events(events_frame(a + errs + b))
    assert an.incidents.height == 1
    inc = an.incidents.row(0, named=True)
    assert inc["root_cause"] == "gpu_hardware"
    assert inc["nodes"] == ["n7"]
    assert inc["symptoms"] == ["collective_timeout"]
    assert inc["evidence"][0].startswith("r/kern:")
    assert inc["confidence"] == "high"
    assert inc["t_first_error"].timestamp() - inc["t_last_progress"].timestamp() == pytest.approx(20)
    assert inc["downtime_s"] == pytest.approx(end + 100 + 5 - t_last)  # resumed = first step start


def test_collective_timeout_alone():
    a, t_last, end = _attempt(0, 1, 20, "1", "FAILED", end_gap=620)
    errs = [dict(ts=t_last + 600, kind="error", rank=r, failure_class="collective_timeout", file="r/train")
            for r in range(8)]
    an = analyze_events(events_frame(a + errs))
    inc = an.incidents.row(0, named=True)
    assert inc["root_cause"] == "collective_timeout" and inc["confidence"] == "medium"
    assert not an.tor["ended_cleanly"][0]


def test_silent_stall_then_cancel_is_a_hang_short_one_is_user_cancel():
    a, _, _ = _attempt(0, 1, 20, "1", "CANCELLED by 1000", end_gap=3600)
    inc = analyze_events(events_frame(a)).incidents.row(0, named=True)
    assert inc["root_cause"] == "hang" and not inc["planned"]
    assert inc["t_first_error"] is None
    assert "stalled" in inc["reason"]
    a, _, _ = _attempt(0, 1, 20, "1", "CANCELLED by 1000", end_gap=5)
    inc = analyze_events(events_frame(a)).incidents.row(0, named=True)
    assert inc["root_cause"] == "user_cancel" and inc["planned"]


def test_walltime_after_stall_is_hang_and_plain_walltime_is_planned():
    a, _, _ = _attempt(0, 1, 20, "1", "TIMEOUT", end_gap=7200)
    assert analyze_events(events_frame(a)).incidents["root_cause"].to_list() == ["hang"]
    a, _, _ = _attempt(0, 1, 20, "1", "TIMEOUT", end_gap=3)
    inc = analyze_events(events_frame(a)).incidents.row(0, named=True)
    assert inc["root_cause"] == "walltime" and inc["planned"]


def test_job_level_states_are_evidence():
    for state, cls in [("NODE_FAIL", "node_failure"), ("OUT_OF_MEMORY", "oom_host"), ("PREEMPTED", "preemption"),
                       ("CANCELLED by 0", "maintenance")]:
        a, _, _ = _attempt(0, 1, 20, "1", state, end_gap=20)
        assert analyze_events(events_frame(a)).incidents["root_cause"].to_list() == [cls], state


def test_oom_at_startup_after_gpu_fault_on_same_node_is_hardware():
    a, t_last, end = _attempt(0, 1, 20, "1", "FAILED", end_gap=30)
    a.append(dict(ts=t_last + 5, kind="error", node="n2", code="79", failure_class="gpu_hardware", file="r/kern"))
    b = [dict(ts=end + 60, kind="job_start", job_id="2", file="r/sacct"),
         dict(ts=end + 70, kind="init", file="r/train"),
         dict(ts=end + 80, kind="error", node="n2", failure_class="oom_gpu", file="r/train"),
         dict(ts=end + 85, kind="job_end", job_id="2", state="FAILED", file="r/sacct")]
    c, _, _ = _attempt(end + 200, 11, 30, "3", "COMPLETED", load=10)
    an = analyze_events(events_frame(a + b + c))
    assert an.incidents["root_cause"].to_list() == ["gpu_hardware", "gpu_hardware"]
    second = an.incidents.row(1, named=True)
    assert "OOM" in second["reason"] and second["symptoms"] == ["oom_gpu"]
    assert an.incidents["lost_steps"].to_list() == [10, 0]


def test_nan_loss_is_numerics_even_long_before_the_stop():
    rec = [dict(ts=0, kind="job_start", job_id="1", file="r/s")]
    for s in range(1, 200):
        rec.append(dict(ts=s * 10.0, kind="step", step=s, step_time_s=10.0, loss=float("nan") if s > 100 else 2.0,
                        file="r/t"))
    rec.append(dict(ts=2000, kind="job_end", job_id="1", state="CANCELLED by 1000", file="r/s"))
    inc = analyze_events(events_frame(rec)).incidents.row(0, named=True)
    assert inc["root_cause"] == "numerics"
    assert inc["t_first_error"].timestamp() == pytest.approx(events_frame([dict(ts=1010.0)])["ts"][0].timestamp())


def test_no_evidence_short_stop_is_unknown():
    a, _, end = _attempt(0, 1, 20, "1", "FAILED", end_gap=15)
    b, _, _ = _attempt(end + 50, 21, 25, "2", "COMPLETED")
    inc = analyze_events(events_frame(a + b)).incidents.row(0, named=True)
    assert inc["root_cause"] == "unknown" and inc["confidence"] == "low"
