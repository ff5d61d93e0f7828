"""Job and attempt identity across sources."""

from __future__ import annotations

import pytest

from toranalyze.reconstruct.analysis import analyze_events, events_frame


def _steps(t0, s0, s1, dt=10.0, file="run/train.log", **kw):
    return [dict(ts=t0 + (s - s0 + 1) * dt, kind="step", step=s, step_time_s=dt, file=file, **kw) for s in range(s0, s1 + 1)]


def test_requeue_chain_of_job_ids_is_one_job_with_two_attempts():
    rec = [dict(ts=0, kind="job_start", job_id="100", file="run/sacct.txt")]
    rec += _steps(0, 1, 20)
    rec += [dict(ts=230, kind="job_end", job_id="100", state="NODE_FAIL", file="run/sacct.txt")]
    rec += [dict(ts=300, kind="job_start", job_id="107", file="run/sacct.txt")]
    rec += [dict(ts=310, kind="ckpt_load", step=10, file="run/train.log")]
    rec += _steps(310, 11, 40)
    rec += [dict(ts=700, kind="job_end", job_id="107", state="COMPLETED", file="run/sacct.txt")]
    an = analyze_events(events_frame(rec))
    assert an.tor.height == 1
    assert an.tor["job_ids"][0].to_list() == ["100", "107"]
    assert an.attempts["job_id"].to_list() == ["100", "107"]
    assert an.attempts["resumed_from"].to_list() == [0, 10]


def test_slurm_step_ids_fold_into_their_job():
    rec = [
        dict(ts=0, kind="job_start", job_id="55", file="r/sacct"),
        dict(ts=1, kind="job_start", job_id="55.0", file="r/sacct"),
    ]
    rec += _steps(1, 1, 10, file="r/train.log")
    rec += [
        dict(ts=120, kind="job_end", job_id="55.0", state="COMPLETED", file="r/sacct"),
        dict(ts=121, kind="job_end", job_id="55.batch", state="COMPLETED", file="r/sacct"),
        dict(ts=122, kind="job_end", job_id="55", state="COMPLETED", file="r/sacct"),
    ]
    an = analyze_events(events_frame(rec))
    assert an.tor.height == 1 and an.attempts.height == 1
    assert an.tor["ended_cleanly"][0]
    assert an.incidents.height == 0


def test_directory_without_ids_is_one_job_and_says_so():
    rec = [dict(ts=0, kind="init", file="d/train.log")] + _steps(0, 1, 10, file="d/train.log")
    an = analyze_events(events_frame(rec))
    assert an.tor.height == 1
    assert an.tor["identity"][0] == "directory"
    assert any("directory" in n for n in an.notes)
    assert not an.tor["ended_cleanly"][0]  # the log just stops


def test_two_directories_two_jobs_and_concurrent_ids_in_one_directory():
    a = [dict(ts=0, kind="job_start", job_id="1", file="a/s")] + _steps(0, 1, 5, file="a/t")
    b = [dict(ts=0, kind="job_start", job_id="2", file="b/s")] + _steps(0, 1, 5, file="b/t")
    an = analyze_events(events_frame(a + b))
    assert an.tor.height == 2
    # Two overlapping scheduler jobs in one directory are two runs.
    c = [dict(ts=0, kind="job_start", job_id="8", file="c/s"), dict(ts=5, kind="job_start", job_id="9", file="c/s")]
    c += _steps(0, 1, 5, file="c/t8", job_id="8") + _steps(5, 1, 5, file="c/t9", job_id="9")
    c += [dict(ts=100, kind="job_end", job_id="8", state="COMPLETED", file="c/s"),
          dict(ts=100, kind="job_end", job_id="9", state="COMPLETED", file="c/s")]
    an = analyze_events(events_frame(c))
    assert an.tor.height == 2


def test_same_job_name_chains_ids():
    rec = [dict(ts=0, kind="job_start", job_id="10", file="x/sacct", message="JobName=gpt")]
    rec += _steps(0, 1, 5, file="x/t")
    rec += [dict(ts=60, kind="job_end", job_id="10", state="TIMEOUT", file="x/sacct", message="JobName=gpt")]
    rec += [dict(ts=100, kind="job_start", job_id="30", file="x/sacct", message="JobName=gpt")]
    rec += _steps(100, 6, 10, file="x/t")
    rec += [dict(ts=200, kind="job_end", job_id="30", state="COMPLETED", file="x/sacct", message="JobName=gpt")]
    an = analyze_events(events_frame(rec))
    assert an.tor.height == 1 and an.tor["identity"][0] == "job-name"
    assert an.attempts.height == 2


def test_torchrun_restart_and_init_banners_open_attempts_once_per_cluster():
    rec = [dict(ts=0, kind="init", rank=r, file="t/log") for r in range(4)]
    rec += _steps(0, 1, 10, file="t/log")
    rec += [dict(ts=105, kind="error", failure_class="software", file="t/log"),
            dict(ts=110, kind="restart", file="t/log")]
    rec += [dict(ts=111 + r * 0.1, kind="init", rank=r, file="t/log") for r in range(4)]
    rec += [dict(ts=120, kind="ckpt_load", step=5, file="t/log")]
    rec += _steps(120, 6, 15, file="t/log")
    an = analyze_events(events_frame(rec))
    assert an.attempts.height == 2
    assert an.incidents.height == 1
    assert an.incidents["root_cause"][0] == "software"
    assert an.incidents["lost_steps"][0] == 5


def test_ranks_logging_the_same_step_are_deduplicated():
    rec = []
    for r in range(8):
        rec += _steps(0, 1, 10, file=f"t/rank{r}.log", rank=r)
    an = analyze_events(events_frame(rec))
    assert an.attempts["n_step_records"][0] == 10
    assert an.tor["steps_preserved"][0] == 10


def test_other_users_jobs_in_the_controller_log_stay_out_of_a_named_run():
    """Nameless ids of a shared slurmctld.log that follow one another in time are not the run's
    attempts, even when they outnumber the run's own scheduler records."""
    rec = [dict(ts=0, kind="job_start", job_id="900", message="JobID=900 JobName=gpt", file="run/sacct.txt")]
    rec += _steps(30, 1, 60, file="run/slurm-900.out")
    rec += [dict(ts=700, kind="job_end", job_id="900", state="COMPLETED", message="JobName=gpt", file="run/sacct.txt")]
    for k in range(12):  # another user's short jobs, one after the other
        rec += [dict(ts=50 + 50 * k, kind="job_start", job_id=str(850 + k), file="run/slurmctld.log"),
                dict(ts=90 + 50 * k, kind="job_end", job_id=str(850 + k), state="COMPLETED", file="run/slurmctld.log")]
    an = analyze_events(events_frame(sorted(rec, key=lambda r: r["ts"])))
    assert an.tor.height == 1
    assert an.tor["job_ids"][0].to_list() == ["900"]
    assert an.attempts.height == 1 and an.incidents.height == 0
    assert any("scheduler records only" in n for n in an.notes)


def test_attempt_without_lifecycle_records_ends_at_its_last_record():
    """Regression: an attempt with only kernel records had no end, and a 2**62 sentinel became
    its end (an incident detected in the year 148108)."""
    rec = [dict(ts=10, kind="error", source="kernel", node="n1", failure_class="gpu_hardware", file="k/kern.log"),
           dict(ts=50, kind="warning", source="kernel", node="n1", file="k/kern.log")]
    an = analyze_events(events_frame(rec))
    assert an.tor["t_obs_s"][0] == 40.0
    assert an.attempts["t_end"][0].year == 2024
    assert an.incidents["t_detected"][0].year == 2024


def test_kubernetes_pods_directory_joins_the_run_and_other_owners_stay_apart():
    """Per-attempt pod YAML lives under pods/ with the run's owner id; another namespace's pod in
    the same event stream is another job, however its times fall."""
    rec = [dict(ts=-800, kind="job_start", job_id="data-prep", node="cpu-033", file="k/events.json"),
           dict(ts=-10, kind="job_start", job_id="train", file="k/events.json"),
           dict(ts=0, kind="job_start", job_id="train", node="gpu-001", file="k/pods/train-master-0.attempt-0.yaml")]
    rec += _steps(30, 1, 40, file="k/logs/train-master-0.log")
    rec += [dict(ts=450, kind="job_end", job_id="train", node="gpu-001", state="Error", file="k/pods/train-master-0.attempt-0.yaml"),
            dict(ts=500, kind="job_start", job_id="train", node="gpu-002", file="k/pods/train-master-0.attempt-1.yaml"),
            dict(ts=520, kind="ckpt_load", step=30, file="k/logs/train-master-0.log")]
    rec += _steps(520, 31, 60, file="k/logs/train-master-0.log")
    rec += [dict(ts=900, kind="job_end", job_id="train", state="PyTorchJobSucceeded", file="k/events.json")]
    an = analyze_events(events_frame(rec))
    assert an.tor.height == 1 and an.tor["job"][0] == "k::train"
    t = an.tor.row(0, named=True)
    assert t["ended_cleanly"] and t["n_attempts"] == 2 and t["n_incidents"] == 1
    assert an.attempts["t_start"][0].timestamp() - an.tor["t_start"][0].timestamp() == 0
    assert an.tor["t_obs_s"][0] == 900.0  # from the container start, not the job-level "started"


def test_excerpt_without_timestamps_gets_a_relative_clock():
    rec = [dict(kind="step", step=s, step_time_s=100.0 + (s == 5) * 20, file="x/loss_spike.log") for s in range(1, 11)]
    rec += [dict(kind="error", failure_class="gpu_memory", file="x/loss_spike.log")]
    an = analyze_events(events_frame([{**r, "ts": None} for r in rec]))
    t = an.tor.row(0, named=True)
    assert t["t_obs_s"] == pytest.approx(1020.0) and t["useful_s"] == pytest.approx(1000.0)
    assert an.incidents["root_cause"].to_list() == ["gpu_memory"]
    assert any("no record has a timestamp" in n for n in an.notes)


def test_interleaved_records_get_the_jobs_of_their_file_and_id():
    # Job assignment sums records up by runs of the same file and id: records of several files
    # interleaved line by line (many short runs) must get what the files one after the other get.
    from toranalyze.reconstruct.jobs import assign_jobs, with_time

    a = [dict(ts=0, kind="job_start", job_id="10", file="r/sacct", message="JobName=pretrain")]
    a += [dict(ts=400, kind="job_end", job_id="10", state="NODE_FAIL", file="r/sacct")]
    a += [dict(ts=500, kind="job_start", job_id="12", file="r/sacct", message="JobName=pretrain")]
    a += [dict(ts=900, kind="job_end", job_id="12", state="COMPLETED", file="r/sacct")]
    a += [dict(ts=950, kind="job_start", job_id="30", file="r/sacct")]  # another user's job
    b = _steps(0, 1, 30, file="r/train.log") + _steps(500, 31, 60, file="r/train.log")
    c = [dict(ts=5 + 20 * i, kind="info", file="r/nodes/gpu-01/kern.log") for i in range(30)]
    for recs in (a, b, c):  # line numbers within each file, whatever the order of the table
        for i, r in enumerate(recs, 1):
            r["line"] = i
    apart = events_frame(a + b + c)
    mixed = [r for trio in zip(b, c, a + [None] * 30, strict=False) for r in trio if r is not None]
    mixed = events_frame(mixed + b[len(c):])
    out = []
    for ev in (apart, mixed):
        ev, jobs = assign_jobs(with_time(ev))
        out.append((ev.select("file", "line", "job", "base_job_id").sort("file", "line"), jobs))
    assert out[0][0].equals(out[1][0])
    assert out[0][1].equals(out[1][1])
    assert out[0][1].select("job", "job_ids").rows() == [("r::30", ["30"]), ("r::pretrain", ["10", "12"])]


def test_notes_of_jobs_without_timestamps_come_in_job_order():
    rec = []
    for d in ("c", "a", "b"):
        rec += [dict(ts=None, kind="step", step=s, step_time_s=1.0, file=f"{d}/train.log") for s in range(1, 6)]
    notes = [n for n in analyze_events(events_frame(rec)).notes if "no record has a timestamp" in n]
    assert notes == sorted(notes) and len(notes) == 3


def test_words_outside_the_vocabulary_and_null_sources_read_as_text():
    """kind, source and severity become enums for the stages: a plugin's own words still count,
    and an error without a source still ends its attempt (it is not a kernel record)."""
    rec = [dict(ts=0, kind="init", file="p/train.log", source="trainer")]
    rec += _steps(0, 1, 10, file="p/train.log", source="trainer")
    rec += [dict(ts=150, kind="probe", source="my-plugin", severity="notice", file="p/probe.log"),
            dict(ts=160, kind="error", source=None, severity="error", file="p/train.log"),
            dict(ts=170, kind="error", source="kernel", severity="error", file="p/kern.log")]
    an = analyze_events(events_frame(rec))
    assert an.attempts.height == 1
    assert int(an.tor["t_obs_us"][0]) == 160_000_000
