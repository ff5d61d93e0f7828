"""Incidents: grouping, root cause by causal priority, special rules, phases."""

from __future__ import annotations

import pytest

from toranalyze.reconstruct.analysis import analyze_events, events_frame


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


def test_distant_non_fatal_warning_is_noise_and_a_silent_stall_is_a_hang():
    """A non-fatal NVSwitch warning half an hour into a stall does not explain it; the user's
    cancel after the stall makes it a hang."""
    a, t_last, end = _attempt(0, 1, 20, "1", "CANCELLED by 1000", end_gap=2400)
    noise = [dict(ts=t_last + 1500, kind="warning", severity="warning", node="n2", failure_class="gpu_interconnect",
                  rule="kernel-nvswitch-sxid", file="r/kern")]
    b, _, _ = _attempt(end + 60, 11, 30, "2", "COMPLETED", load=10)
    inc = analyze_events(events_frame(a + noise + b)).incidents.row(0, named=True)
    assert inc["root_cause"] == "hang"
    assert "gpu_interconnect" not in inc["symptoms"]


def test_warning_at_the_onset_still_counts_but_never_beats_an_error():
    a, t_last, end = _attempt(0, 1, 20, "1", "FAILED", end_gap=30)
    recs = [dict(ts=t_last + 2, kind="warning", severity="warning", node="n2", failure_class="gpu_interconnect",
                 file="r/kern"),
            dict(ts=t_last + 3, kind="error", severity="error", rank=5, failure_class="oom_gpu", file="r/train")]
    inc = analyze_events(events_frame(a + recs)).incidents.row(0, named=True)
    assert inc["root_cause"] == "oom_gpu" and "gpu_interconnect" in inc["symptoms"]
    inc = analyze_events(events_frame(a + recs[:1])).incidents.row(0, named=True)
    assert inc["root_cause"] == "gpu_interconnect" and inc["confidence"] == "medium"


def test_exit_codes_alone_are_unknown_and_rank_below_collective_timeouts():
    a, t_last, end = _attempt(0, 1, 20, "1", "FAILED", end_gap=300)
    weak = [dict(ts=t_last + 290, kind="error", severity="error", rank=3, node="n0", failure_class="software",
                 rule="torch-child-failed", file="r/train"),
            dict(ts=end, kind="job_end", job_id="1", state="FAILED", severity="error", failure_class="software",
                 rule="slurm-failed-weak", file="r/sacct")]
    b, _, _ = _attempt(end + 60, 11, 30, "2", "COMPLETED", load=10)
    inc = analyze_events(events_frame(a + weak + b)).incidents.row(0, named=True)
    assert inc["root_cause"] == "unknown" and inc["confidence"] == "low"
    assert inc["ranks"] == [3]
    timeouts = [dict(ts=t_last + 250, kind="error", severity="error", rank=r, failure_class="collective_timeout",
                     rule="nccl-watchdog-timeout", file="r/train") for r in range(4)]
    inc = analyze_events(events_frame(a + weak + timeouts + b)).incidents.row(0, named=True)
    assert inc["root_cause"] == "collective_timeout"
    # A kill signal after a long silent stall is how a hang ends.
    sig = [dict(ts=t_last + 290, kind="error", severity="error", rank=3, failure_class="unknown",
                rule="torch-exit-sigkill", file="r/train")]
    inc = analyze_events(events_frame(a + sig + b)).incidents.row(0, named=True)
    assert inc["root_cause"] == "hang"


def test_caught_up_is_measured_to_the_interrupted_attempts_own_last_step():
    """After a rollback past an earlier attempt's work, catching up means reaching the steps of
    the attempt that was interrupted, not the highest step the job ever logged."""
    a, _, end_a = _attempt(0, 1, 40, "1", "CANCELLED by 1000", end_gap=20)  # NaN run, rolled back
    b, _, end_b = _attempt(end_a + 30, 11, 15, "2", "FAILED", end_gap=20, load=10)
    c, _, _ = _attempt(end_b + 30, 11, 50, "3", "COMPLETED", load=10)
    inc = analyze_events(events_frame(a + b + c)).incidents.sort("attempt").row(1, named=True)
    # attempt 3 starts its first step at end_b + 35 and reaches step 15 five steps later
    assert inc["t_caught_up"].timestamp() - inc["t_resumed"].timestamp() == pytest.approx(50.0)


def test_heartbeats_without_progress_until_the_logs_end_are_a_hang():
    """A cluster watchdog keeps saying the job runs while no step comes: the log ends in a hang."""
    rec, t_last, _ = _attempt(0, 1, 20, "1", "COMPLETED")
    rec = [r for r in rec if r["kind"] != "job_end"]
    rec += [dict(ts=t_last + 3600 * k, kind="heartbeat", message="PULSE: running", file="r/pulse") for k in (1, 2)]
    an = analyze_events(events_frame(rec))
    inc = an.incidents.row(0, named=True)
    assert inc["root_cause"] == "hang" and inc["t_first_error"] is None
    assert an.tor["detection_s"][0] == pytest.approx(7200.0)
    assert not an.tor["ended_cleanly"][0]
    # A log that just stops after its last step is no incident (a truncated run).
    assert analyze_events(events_frame(rec[:-2])).incidents.height == 0
