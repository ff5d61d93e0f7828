"""The slurm parser: stepd banners, srun / slurmctld / slurmd lines, watchdog lines, sacct tables."""

from __future__ import annotations

from datetime import datetime
from importlib import resources
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toranalyze_parsers.slurm import parser
from toranalyze_parsers.slurm.common import hostlist_count, normalize_state, single_host
from toranalyze_parsers.slurm.sacct import parse_document

from tests.conftest import DATA, assert_golden, extract_lines, parse_file
from toranalyze.ingest.classify import Rule, classify, parse_rules
from toranalyze.ingest.lines import lines_from_strings
from toranalyze.ingest.reader import read_document_events, read_text_events
from toranalyze.ingest.streams import read_head
from toranalyze.schema import KINDS, SEVERITIES, validate_raw

HERE = DATA / "slurm"
REAL = HERE / "real"
GOLDEN = HERE / "golden"


def _rules() -> list[Rule]:
    text = (resources.files("toranalyze") / "rules" / "slurm.toml").read_text(encoding="utf-8")
    return parse_rules(text, "slurm.toml")


RULES = _rules()


def _classified(events: pl.DataFrame) -> pl.DataFrame:
    return classify(events.with_columns(pl.lit("slurm").alias("source")), RULES).collect()


def _one(lines: list[str]) -> dict:
    out = extract_lines(parser, lines)
    assert out.height == 1, out
    return out.row(0, named=True)


def _doc(path: Path) -> pl.DataFrame:
    assert parser.sniff(read_head(str(path)).decode()), path.name
    return read_document_events(str(path), parser).events


# ---------------------------------------------------------------- real logs

REAL_FILES = sorted(p.name for p in REAL.iterdir())


@pytest.mark.parametrize("name", REAL_FILES)
def test_real_logs_golden(name: str) -> None:
    events = parse_file(parser, REAL / name)
    validate_raw(events.drop("parser", "source"), "slurm")
    assert_golden(events, GOLDEN / f"{Path(name).stem}.json")


# (file, expected (line, kind, state, failure_class) of the classified failure records)
REAL_LABELS = {
    "bigscience_meg_gpt2_n16_pp16_user_scancel_1809577.log": [
        (143, "job_end", "CANCELLED", "user_cancel"),
        (148, "job_end", "CANCELLED", "user_cancel"),
    ],
    "bigscience_megds_zero3_52b_n16_time_limit_cancel_1999616.log": [
        (78, "job_end", "TIMEOUT", "walltime"),
        (79, "job_end", "TIMEOUT", "walltime"),
    ],
    "tr141_exp6_iter2500_validation_then_node_failure_iam37.log": [
        (5, "error", "NODE_FAIL", "node_failure"),
        (7, "job_end", "NODE_FAIL", "node_failure"),
    ],
    "tr141_exp2_cuda_unknown_error_then_node_failure_iam49.log": [(34, "error", "NODE_FAIL", "node_failure")],
    "tr1_13b_ckpt_save_exit_then_not_scheduled_alert.log": [
        (8, "warning", None, "scheduling"),
        (9, "warning", None, "scheduling"),
    ],
    "bloom176b_eval_hang_45000_pulse.log": [],
}


@pytest.mark.parametrize("name", sorted(REAL_LABELS))
def test_real_logs_classify_as_labelled(name: str) -> None:
    ev = _classified(parse_file(parser, REAL / name))
    got = ev.filter(pl.col("failure_class").is_not_null()).select("line", "kind", "state", "failure_class").rows()
    assert got == REAL_LABELS[name]


def test_scancel_log_banner_fields_and_flood() -> None:
    ev = parse_file(parser, REAL / "bigscience_meg_gpt2_n16_pp16_user_scancel_1809577.log")
    step, job = ev.filter(pl.col("kind") == "job_end").iter_rows(named=True)
    assert (step["job_id"], step["node"], step["ts"]) == ("1809577", "r6i5n1", datetime(2021, 5, 23, 8, 46, 2))
    assert "STEP 1809577.0" in step["message"] and "JOB 1809577 " in job["message"]
    # The launcher's 'Killing subprocess' / SIGTERM flood is one warning, the rest is covered noise.
    warnings = ev.filter(pl.col("message").str.contains("SIGTERM"))
    assert warnings.height == 1 and warnings["code"].to_list() == ["15"]
    res = read_text_events(str(REAL / "bigscience_meg_gpt2_n16_pp16_user_scancel_1809577.log"), [parser])
    assert res.covered == 224 - 141  # every line from 'srun: Job step aborted' to the end


def test_node_failure_log_names_the_failed_node() -> None:
    ev = parse_file(parser, REAL / "tr141_exp6_iter2500_validation_then_node_failure_iam37.log")
    fail = ev.filter(pl.col("kind") == "error").row(0, named=True)
    assert fail["node"] == "jean-zay-iam37"
    end = ev.filter(pl.col("kind") == "job_end").row(0, named=True)
    assert (end["job_id"], end["state"], end["ts"]) == ("1943824", "NODE_FAIL", datetime(2023, 3, 6, 3, 17, 51))


def test_pulse_watchdog_lines() -> None:
    ev = parse_file(parser, REAL / "bloom176b_eval_hang_45000_pulse.log")
    beats = ev.filter(pl.col("kind") == "heartbeat")
    assert beats["job_id"].unique().to_list() == ["1528763"]
    assert beats["n_nodes"].to_list() == [48, 48, 48]  # jean-zay-iam[01-34,36-49]
    assert beats["duration_s"].to_list() == [113253.0, 116855.0, 120460.0]  # 1-07:27:33 ...
    assert beats["ts"].to_list()[0] == datetime(2022, 5, 1, 3, 56, 11)
    pending = ev.filter(pl.col("kind") == "info")
    assert pending["job_id"].unique().to_list() == ["1528874"]  # the array 1528874_[1-3%1]
    assert pending["state"].unique().to_list() == ["PENDING"]


# ---------------------------------------------------------------- stepd banners

BANNERS = [
    # (line, job_id, node, state, severity, AT time)
    ("*** JOB 123 CANCELLED AT 2012-06-01T10:00:00 *** on node07", "123", "node07", "CANCELLED", "warning",
     "2012-06-01T10:00:00"),
    ("slurmstepd: *** JOB 124 CANCELLED AT 2012-06-01T10:00:00 DUE TO TIME LIMIT on node08 ***", "124", "node08",
     "TIMEOUT", "warning", "2012-06-01T10:00:00"),
    ("slurmstepd: error: *** JOB 125 ON gpu01 CANCELLED AT 2024-01-01T00:00:00 DUE TO PREEMPTION ***", "125",
     "gpu01", "PREEMPTED", "warning", "2024-01-01T00:00:00"),
    ("[2024-01-01T00:00:01.123] error: *** JOB 126 ON gpu02 CANCELLED AT 2024-01-01T00:00:00 DUE TO JOB REQUEUE ***",
     "126", "gpu02", "REQUEUED", "warning", "2024-01-01T00:00:00"),
    ("slurmstepd: error: *** STEP 127.0 ON gpu03 CANCELLED AT 2024-01-01T00:00:00 ***", "127", "gpu03",
     "CANCELLED", "warning", "2024-01-01T00:00:00"),
    ("srun: error: *** STEP 128.0 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***", "128", None,
     "TIMEOUT", "warning", "2024-01-01T00:00:00"),
    ("slurmstepd: error: *** STEP 129.3 ON gpu04 CANCELLED AT 2024-01-01T00:00:00 DUE TO NODE FAILURE, SEE "
     "SLURMCTLD LOG FOR DETAILS ***", "129", "gpu04", "NODE_FAIL", "error", "2024-01-01T00:00:00"),
    ("slurmstepd: error: *** JOB 130 ON gpu05 CANCELLED AT 2024-01-01T00:00:00 DUE TO TASK FAILURE ***", "130",
     "gpu05", "FAILED", "error", "2024-01-01T00:00:00"),
    ("slurmstepd: error: *** JOB 131 ON gpu06 UNCORRECTABLE MEMORY ERROR AT 2024-01-01T00:00:00 ***", "131",
     "gpu06", "FAILED", "critical", "2024-01-01T00:00:00"),
    ("slurmstepd: error: *** JOB 132 ON gpu07 CANCELLED AT 2024-01-01T00:00:00 DUE TO UNCORRECTABLE MEMORY "
     "ERROR ***", "132", "gpu07", "FAILED", "critical", "2024-01-01T00:00:00"),
    ("slurmstepd: error: *** STEP 133.0 ON gpu08 FAILED (non-zero exit code or other failure mode) ***", "133",
     "gpu08", "FAILED", "error", None),
]


@pytest.mark.parametrize(("line", "job_id", "node", "state", "severity", "at"), BANNERS)
def test_stepd_banner_shapes(line: str, job_id: str, node: str | None, state: str, severity: str,
                             at: str | None) -> None:
    row = _one([line])
    assert row["kind"] == "job_end"
    assert (row["job_id"], row["node"], row["state"], row["severity"]) == (job_id, node, state, severity)
    assert row["ts"] == (datetime.fromisoformat(at) if at else None)
    assert row["ts_offset_s"] is None  # slurmstepd prints the cluster's wall clock without a zone


def test_banner_classes() -> None:
    ev = _classified(extract_lines(parser, [b[0] for b in BANNERS]))
    assert ev["failure_class"].to_list() == [
        "user_cancel", "walltime", "preemption", "maintenance", "user_cancel", "walltime", "node_failure",
        "software", "host_hardware", "host_hardware", "software",
    ]


def test_stepd_terminated_and_reason_lines() -> None:
    out = extract_lines(parser, [
        "slurmstepd: error: *** JOB 133 STEPD TERMINATED ON gpu08 AT 2024-01-01T00:05:00 DUE TO JOB NOT ENDING "
        "WITH SIGNALS ***",
        "slurmstepd: error: *** REASON: requeued by admin ***",
    ])
    stuck, reason = out.iter_rows(named=True)
    assert (stuck["kind"], stuck["job_id"], stuck["node"], stuck["state"]) == ("error", "133", "gpu08", None)
    assert stuck["ts"] == datetime(2024, 1, 1, 0, 5)
    assert (reason["kind"], reason["message"]) == ("info", "slurmstepd: error: *** REASON: requeued by admin ***")


# ---------------------------------------------------------------- OOM

@pytest.mark.parametrize(
    ("line", "job_id"),
    [
        ("slurmstepd: error: Detected 1 oom-kill event(s) in step 140.batch cgroup. Some of your processes may "
         "have been killed by the cgroup out-of-memory handler.", "140"),
        ("slurmstepd: error: Detected 5 oom-kill event(s) in StepId=141.batch cgroup. Some of your processes may "
         "have been killed by the cgroup out-of-memory handler.", "141"),
        ("slurmstepd: error: Detected 1 oom_kill event in StepId=142.batch. Some of the step tasks have been OOM "
         "Killed.", "142"),
        ("[2024-01-01T00:00:01.123] [143_2.0] error: Detected 2 oom-kill event(s) in StepId=143_2.0. Some of your "
         "processes may have been killed by the cgroup out-of-memory handler.", "143_2"),
        ("slurmstepd: error: Job 144 exceeded memory limit (1048576 > 1000000), being killed", "144"),
        ("slurmstepd: error: Detected 1 oom-kill event(s). Some of your processes may have been killed by the "
         "cgroup out-of-memory handler.", None),
    ],
)
def test_oom_wordings(line: str, job_id: str | None) -> None:
    row = _one([line])
    assert (row["kind"], row["severity"], row["state"], row["job_id"]) == ("error", "error", "OUT_OF_MEMORY", job_id)
    assert _classified(extract_lines(parser, [line]))["failure_class"].to_list() == ["oom_host"]


def test_oom_notice_joined_with_sruns_task_line_takes_its_node() -> None:
    # https://github.com/nextflow-io/nextflow/issues/5932: both lines pasted as one sentence of a post.
    rows = extract_lines(parser, [
        "it gives me the error slurmstepd: error: Detected 1 oom_kill event in StepId=11300781.0. Some of the "
        "step tasks have been OOM Killed. srun: error: sdumont6156: task 0: Out Of Memory, how do I remove"])
    notice = rows.filter(pl.col("job_id") == "11300781").row(0, named=True)
    assert (notice["state"], notice["node"]) == ("OUT_OF_MEMORY", "sdumont6156")


@pytest.mark.parametrize(
    ("line", "state", "failure_class"),
    [
        # https://github.com/marbl/canu/issues/1214
        ("=>> PBS: job killed: walltime 86415 exceeded limit 86400", "TIMEOUT", "walltime"),
        ("=>> PBS: job killed: mem 8519196kb exceeded limit 8388608kb", "OUT_OF_MEMORY", "oom_host"),
    ],
)
def test_pbs_limit_kills_end_the_job(line: str, state: str, failure_class: str) -> None:
    row = _one([line])
    assert (row["kind"], row["state"]) == ("job_end", state)
    assert _classified(extract_lines(parser, [line]))["failure_class"].to_list() == [failure_class]


def test_memory_limit_notice_without_kill_is_a_warning() -> None:
    row = _one(["slurmstepd: error: Exceeded step memory limit at some point."])
    assert (row["kind"], row["severity"]) == ("warning", "warning")
    # and no OOM end: the step went on (https://github.com/galaxyproject/galaxy/issues/2359, a completed job)
    assert row["state"] is None


def test_slurmd_step_tag_gives_the_job() -> None:
    row = _one(["[2024-01-01T00:00:01.123] [145.batch] error: Detected 1 oom-kill event(s) in StepId=145.batch "
                "cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler."])
    assert row["job_id"] == "145"
    assert row["ts"] == datetime(2024, 1, 1, 0, 0, 1, 123000)


# ---------------------------------------------------------------- srun

@pytest.mark.parametrize(
    ("line", "node", "rank", "code", "state", "cls"),
    [
        ("srun: error: gpu09: task 3: Exited with exit code 1", "gpu09", 3, "1", None, None),
        ("srun: error: gpu09: task 3: Exited with exit code 255", "gpu09", 3, "255", None, None),
        ("srun: error: gpu10: tasks 8-15: Killed", "gpu10", 8, "9", None, None),
        ("srun: error: gpu10: tasks 16-23: Terminated", "gpu10", 16, "15", None, None),
        ("srun: error: gpu11: tasks 0,2-3: Segmentation fault (core dumped)", "gpu11", 0, "11", None, "software"),
        ("srun: error: gpu11: task 1: Aborted (core dumped)", "gpu11", 1, "6", None, "software"),
        ("srun: error: gpu12: task 5: Out Of Memory", "gpu12", 5, None, "OUT_OF_MEMORY", "oom_host"),
        ("srun: error: Node failure on gpu13", "gpu13", None, None, "NODE_FAIL", "node_failure"),
        # https://github.com/nebius/soperator/issues/854: quoted as inline code, the backtick is not the node's.
        ("`salloc: error: Node failure on worker-1`", "worker-1", None, None, "NODE_FAIL", "node_failure"),
    ],
)
def test_srun_task_and_node_errors(line: str, node: str, rank: int | None, code: str | None, state: str | None,
                                   cls: str | None) -> None:
    row = _one([line])
    assert (row["kind"], row["node"], row["rank"], row["code"], row["state"]) == ("error", node, rank, code, state)
    assert _classified(extract_lines(parser, [line]))["failure_class"].to_list() == [cls]


@pytest.mark.parametrize(
    ("line", "kind", "job_id"),
    [
        ("srun: Job step aborted: Waiting up to 62 seconds for job step to finish.", "warning", None),
        ("srun: forcing job termination", "warning", None),
        ("srun: error: Timed out waiting for job step to complete", "warning", None),
        ("srun: Force Terminated StepId=150.0", "warning", "150"),
        ("srun: Force Terminated job step 151.0", "warning", "151"),
        ("srun: sending Ctrl-C to StepId=152.0", "warning", "152"),
        ("srun: job 153 queued and waiting for resources", "job_submit", "153"),
        ("srun: job 153 has been allocated resources", "job_start", "153"),
        ("salloc: Pending job allocation 154", "job_submit", "154"),
        ("salloc: Granted job allocation 154", "job_start", "154"),
        ("salloc: Job allocation 154 has been revoked.", "job_end", "154"),
        ("Submitted batch job 155", "job_submit", "155"),
        ("srun: error: Unable to allocate resources: Requested node configuration is not available", "error", None),
        ("srun: error: Unable to create step for job 156: Job/step already completing or completed", "error", "156"),
        ("srun: error: something no rule knows", "warning", None),
        ("slurmstepd: error: execve(): python: No such file or directory", "warning", None),
    ],
)
def test_srun_client_lines(line: str, kind: str, job_id: str | None) -> None:
    row = _one([line])
    assert (row["kind"], row["job_id"]) == (kind, job_id)


def test_srun_chatter_is_noise_not_events(tmp_path: Path) -> None:
    lines = ["srun: got SIGCONT", "srun: interrupt (one more within 1 sec to abort)", "Killing subprocess 4242",
             "Main process received SIGTERM, exiting", "Main process received SIGTERM, exiting"]
    f = tmp_path / "job.out"
    f.write_text("\n".join(lines) + "\n")
    res = read_text_events(str(f), [parser])
    assert res.covered == len(lines)
    assert res.events["kind"].to_list() == ["warning"]  # the first SIGTERM of the burst only


def test_sigterm_bursts_far_apart_are_two_warnings() -> None:
    lines = ["Main process received SIGTERM, exiting"] * 3 + ["x"] * 300 + ["Main process received SIGTERM, exiting"]
    out = extract_lines(parser, lines)
    assert out["line"].to_list() == [1, 304]


# ---------------------------------------------------------------- slurmctld / slurmd

def test_slurmctld_log_golden() -> None:
    events = parse_file(parser, HERE / "slurmctld_node_fail_requeue.log")
    assert_golden(events, GOLDEN / "slurmctld_node_fail_requeue.json")
    res = read_text_events(str(HERE / "slurmctld_node_fail_requeue.log"), [parser])
    assert res.covered == res.lines  # bookkeeping lines are noise, the rest are events


CTLD = [
    # (line, kind, job_id, node, state, code, n_nodes, failure_class)
    ("[2024-04-01T00:00:00.412] _slurm_rpc_submit_batch_job: JobId=5100 InitPrio=4294901759 usec=1205",
     "job_submit", "5100", None, "PENDING", None, None, None),
    ("[2024-04-01T00:02:00.031] sched: Allocate JobId=5100 NodeList=gpu[001-032] #CPUs=2048 Partition=gpu",
     "job_start", "5100", None, "RUNNING", None, 32, None),
    ("[2024-04-01T00:02:00.031] sched: Allocate JobId=5101_3(5104) NodeList=gpu007 #CPUs=64 Partition=gpu",
     "job_start", "5101_3", "gpu007", "RUNNING", None, 1, None),
    ("[2024-04-01T00:02:00.031] backfill: Started JobId=5102 in gpu on gpu[001-002,009]",
     "job_start", "5102", None, "RUNNING", None, 3, None),
    ("[2024-04-01T00:02:00.031] _slurm_rpc_allocate_resources: JobId=5103 NodeList=(null) usec=120",
     "job_submit", "5103", None, "PENDING", None, None, None),
    ("[2024-04-01T13:40:51.118] error: Nodes gpu017 not responding",
     "error", None, "gpu017", None, None, 1, "node_failure"),
    ("[2024-04-01T13:45:51.120] error: Nodes gpu[017-018] not responding, setting DOWN",
     "node_state", None, None, "DOWN", None, 2, "node_failure"),
    ("[2024-04-01T13:45:51.121] requeue JobId=5100 due to failure of node gpu017",
     "job_end", "5100", "gpu017", "NODE_FAIL", None, None, "node_failure"),
    ("[2024-04-01T13:45:51.121] requeue job 5112 due to failure of node gpu061",
     "job_end", "5112", "gpu061", "NODE_FAIL", None, None, "node_failure"),
    ("[2024-04-01T13:45:51.121] requeue job JobId=5113 due to failure of node gpu062",
     "job_end", "5113", "gpu062", "NODE_FAIL", None, None, "node_failure"),
    ("[2024-04-01T22:00:00.000] error: Killing JobId=5107 on failed node gpu040",
     "job_end", "5107", "gpu040", "NODE_FAIL", None, None, "node_failure"),
    ("[2024-04-01T22:00:00.000] Killing job_id 5111 on failed node gpu060",
     "job_end", "5111", "gpu060", "NODE_FAIL", None, None, "node_failure"),
    ("[2024-04-01T22:00:00.000] error: Removing failed node gpu041 from JobId=5108",
     "error", "5108", "gpu041", None, None, None, "node_failure"),
    ("[2024-04-01T14:02:11.774] update_node: node gpu017 state set to DRAINED",
     "node_state", None, "gpu017", "DRAIN", None, None, None),
    ("[2024-04-01T14:02:11.774] update_node: node gpu017 state set to DOWN",
     "node_state", None, "gpu017", "DOWN", None, None, None),
    ("[2024-04-01T14:02:11.774] update_node: node gpu017 state set to IDLE",
     "node_state", None, "gpu017", "IDLE", None, None, None),
    ("[2024-04-01T14:02:11.774] update_node: node gpu017 reason set to: xid 79",
     "info", None, "gpu017", None, None, None, None),
    # https://github.com/aws/aws-parallelcluster/issues/6842: the scheduler's health check took the node out.
    ("[2025-07-04T00:54:23.932] update_node: node od-r7i-l-dy-od-16-gb-1-cores-8 reason set to: Scheduler health "
     "check failed", "error", None, "od-r7i-l-dy-od-16-gb-1-cores-8", None, None, None, "node_failure"),
    ("[2024-04-01T14:02:11.774] update_node: node gpu017 reason set to: Not responding",
     "error", None, "gpu017", None, None, None, "node_failure"),
    ("[2024-04-02T00:00:00.000] Node gpu017 now responding",
     "node_state", None, "gpu017", "RESPONDING", None, None, None),
    ("[2024-04-02T01:00:00.000] node gpu017 returned to service",
     "node_state", None, "gpu017", "RESUME", None, None, None),
    ("[2024-04-02T02:00:00.000] validate_node_specs: Node gpu018 unexpectedly rebooted boot_time=1712023100 "
     "last response=1712023000", "node_state", None, "gpu018", "REBOOTED", None, None, "node_failure"),
    ("[2024-04-01T18:00:00.000] Time limit exhausted for JobId=5102",
     "job_end", "5102", None, "TIMEOUT", None, None, "walltime"),
    ("[2024-04-01T18:00:00.000] Time limit exhausted for job_id 5102, terminated",
     "job_end", "5102", None, "TIMEOUT", None, None, "walltime"),
    ("[2024-04-01T18:00:00.000] job_time_limit: Configuration for JobId=5113 time limit exhausted",
     "job_end", "5113", None, "TIMEOUT", None, None, "walltime"),
    ("[2024-04-01T18:10:00.000] _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=5103 uid 1234",
     "job_end", "5103", None, "CANCELLED", None, None, "user_cancel"),
    ("[2024-04-01T18:10:00.000] _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=5103 uid 0",
     "job_end", "5103", None, "CANCELLED", None, None, "maintenance"),
    ("[2024-04-01T19:00:00.000] _job_complete: JobId=5104 WEXITSTATUS 1",
     "job_end", "5104", None, "FAILED", "1", None, "software"),
    ("[2024-04-01T19:00:00.000] _job_complete: JobId=5104 WEXITSTATUS 0",
     "job_end", "5104", None, "COMPLETED", "0", None, None),
    ("[2024-04-01T20:00:00.000] _job_complete: JobId=5105_7(5112) WTERMSIG 9",
     "job_end", "5105_7", None, None, "9", None, None),
    ("[2024-04-02T04:00:00.000] _job_complete: JobId=5109 OOM failure",
     "job_end", "5109", None, "OUT_OF_MEMORY", None, None, "oom_host"),
    ("[2024-04-02T04:00:00.000] _job_complete: JobId=5110 cancelled by node failure",
     "job_end", "5110", None, "NODE_FAIL", None, None, "node_failure"),
    ("[2024-04-02T04:00:00.000] _job_complete: JobId=5110 cancelled by interactive user",
     "job_end", "5110", None, "CANCELLED", None, None, "user_cancel"),
    ("[2024-04-01T21:00:00.000] preempted JobId=5106 has been requeued to reclaim resources for JobId=5200",
     "job_end", "5106", None, "PREEMPTED", None, None, "preemption"),
    ("[2024-04-02T07:00:00.000] preempted JobId=5115 has been killed to reclaim resources for JobId=5202",
     "job_end", "5115", None, "PREEMPTED", None, None, "preemption"),
    ("[2024-04-02T07:00:00.000] preempted JobId=5114 suspended by gang scheduler to reclaim resources for "
     "JobId=5201", "warning", "5114", None, "SUSPENDED", None, None, "preemption"),
    # processes that survive SIGKILL: Slurm drains the node ('Kill task failed'), a node problem
    ("[2024-04-02T03:00:00.000] error: slurmd error running JobId=5108 on node(s)=gpu019: Kill task failed",
     "error", "5108", "gpu019", None, None, None, "node_failure"),
]


@pytest.mark.parametrize(("line", "kind", "job_id", "node", "state", "code", "n_nodes", "cls"), CTLD)
def test_slurmctld_lines(line: str, kind: str, job_id: str | None, node: str | None, state: str | None,
                         code: str | None, n_nodes: int | None, cls: str | None) -> None:
    row = _one([line])
    got = (row["kind"], row["job_id"], row["node"], row["state"], row["code"], row["n_nodes"])
    assert got == (kind, job_id, node, state, code, n_nodes)
    assert row["ts"] is not None and row["ts_year_known"]
    assert _classified(extract_lines(parser, [line]))["failure_class"].to_list() == [cls]


def test_syslog_prefixed_daemon_lines_have_a_yearless_clock() -> None:
    out = extract_lines(parser, [
        "Apr  2 05:00:00 ctl01 slurmctld[2211]: error: Nodes gpu[050-051] not responding",
        "Apr  2 05:00:01 ctl01 slurmctld[2211]: Killing JobId=5110 on failed node gpu050",
    ])
    first, second = out.iter_rows(named=True)
    assert first["ts"] == datetime(2000, 4, 2, 5, 0) and first["ts_year_known"] is False
    assert first["message"] == "error: Nodes gpu[050-051] not responding"  # syslog and daemon tag dropped
    assert (first["n_nodes"], first["node"]) == (2, None)
    assert (second["job_id"], second["node"], second["ts_year_known"]) == ("5110", "gpu050", False)


def test_journald_iso_prefix_keeps_its_zone() -> None:
    row = _one(["2024-04-02T05:00:02+02:00 ctl01 slurmctld[2211]: Killing JobId=5111 on failed node gpu060"])
    assert (row["ts"], row["ts_offset_s"]) == (datetime(2024, 4, 2, 5, 0, 2), 7200)
    assert row["message"] == "Killing JobId=5111 on failed node gpu060"


# ---------------------------------------------------------------- sacct documents

SACCT_FILES = sorted(p.name for p in HERE.glob("sacct_*.txt"))


@pytest.mark.parametrize("name", SACCT_FILES)
def test_sacct_documents_golden(name: str) -> None:
    res = read_document_events(str(HERE / name), parser)
    assert res.covered == res.lines
    assert_golden(res.events, GOLDEN / f"{Path(name).stem}.json")


def test_sacct_fixed_width_cells() -> None:
    ev = _doc(HERE / "sacct_fixed_width_timeout_cancel_oom_array_het.txt")
    ends = {r["message"].split()[0]: r for r in ev.filter(pl.col("kind") == "job_end").iter_rows(named=True)}
    assert set(ends) == {
        "JobID=4242", "JobID=4242.batch", "JobID=4242.extern", "JobID=4242.0", "JobID=4243", "JobID=4243.0",
        "JobID=4244", "JobID=4244.batch", "JobID=4245_3", "JobID=4245_3.0", "JobID=4248+0", "JobID=4249",
    }  # 4246 is PENDING and 4247 RUNNING: no end yet
    job = ends["JobID=4242"]
    assert (job["job_id"], job["state"], job["code"], job["duration_s"]) == ("4242", "TIMEOUT", "0", 86413.0)
    assert (job["n_nodes"], job["n_gpus"], job["node"]) == (4, 32, None)  # gres/gpu=32 read from a cut cell
    assert job["ts"] == datetime(2024, 3, 2, 8, 5, 25)
    batch = ends["JobID=4242.batch"]
    assert (batch["job_id"], batch["state"], batch["node"], batch["n_gpus"]) == ("4242", "CANCELLED", "gpu001", 8)
    assert ends["JobID=4243"]["state"] == "CANCELLED"  # 'CANCELLED+' (CANCELLED by 1234 cut)
    assert ends["JobID=4243.0"]["code"] == "-2"
    assert ends["JobID=4244"]["state"] == "OUT_OF_MEMORY"  # 'OUT_OF_ME+'
    assert ends["JobID=4245_3"]["node"] == "gpu009"  # gpu[009]
    assert ends["JobID=4245_3"]["n_gpus"] == 1  # gres/gpu:a100=1
    assert ends["JobID=4248+0"]["job_id"] == "4248+0"
    assert ends["JobID=4249"]["duration_s"] == 0.0
    # A job cancelled while pending has no start; a pending job only a submit; a running one no end.
    kinds = ev.group_by("job_id").agg(pl.col("kind").unique().sort()).sort("job_id")
    by_job = dict(zip(kinds["job_id"], kinds["kind"].to_list(), strict=True))
    assert by_job["4246"] == ["job_submit"]
    assert by_job["4247"] == ["job_start", "job_submit"]
    assert by_job["4249"] == ["job_end", "job_submit"]


def test_sacct_completed_job_with_a_failed_step_keeps_the_step() -> None:
    ev = _classified(_doc(HERE / "sacct_parsable_trailing_pipe_step_failed.txt"))
    ends = ev.filter(pl.col("kind") == "job_end").select("message", "state", "failure_class")
    rows = {m.split()[0]: (s, c) for m, s, c in ends.rows()}
    assert rows["JobID=5201"] == ("COMPLETED", None)
    assert rows["JobID=5201.0"] == ("OUT_OF_MEMORY", "oom_host")
    assert rows["JobID=5200"] == ("FAILED", "software")
    assert rows["JobID=5200.0"] == ("FAILED", "software")


def test_sacct_parsable2_duplicates_give_one_attempt_per_row() -> None:
    ev = _classified(_doc(HERE / "sacct_parsable2_node_fail_requeue_preempt.txt"))
    jobs = ev.filter((pl.col("kind") == "job_end") & pl.col("message").str.contains(r"^JobID=5100 "))
    assert jobs.select("attempt", "state", "failure_class").rows() == [
        (0, "NODE_FAIL", "node_failure"),
        (1, "PREEMPTED", "preemption"),
        (2, "REQUEUED", "maintenance"),
        (3, "COMPLETED", None),
    ]
    assert jobs["duration_s"].to_list() == [49431.0, 25460.0, 43664.0, 38472.0]  # ElapsedRaw
    assert jobs["n_gpus"].unique().to_list() == [256]
    # Steps of a job that stopped read CANCELLED: they do not claim a cause of their own.
    steps = ev.filter((pl.col("kind") == "job_end") & (pl.col("state") == "CANCELLED"))
    assert steps.height == 3 and steps["failure_class"].null_count() == 3
    # Submit and start rows carry the state the job entered then, not its final state.
    assert set(ev.filter(pl.col("kind") == "job_submit")["state"]) == {"PENDING"}
    assert set(ev.filter(pl.col("kind") == "job_start")["state"]) == {"RUNNING"}
    opened = ev.filter(pl.col("kind").is_in(["job_submit", "job_start"]))
    assert opened.height == 14 and opened["failure_class"].null_count() == 14


def test_sacct_left_aligned_with_relative_times() -> None:
    ev = _classified(_doc(HERE / "sacct_left_aligned_relative_times.txt"))
    end = ev.filter((pl.col("kind") == "job_end") & (pl.col("job_id") == "7001")).row(0, named=True)
    assert end["ts"] == datetime(2000, 9, 4, 13, 2) and end["ts_year_known"] is False
    assert "State=CANCELLED by 51234" in end["message"]
    assert end["failure_class"] == "user_cancel"
    root = ev.filter((pl.col("kind") == "job_end") & (pl.col("job_id") == "7003")).row(0, named=True)
    assert root["failure_class"] == "maintenance"  # CANCELLED by 0


@pytest.mark.parametrize("name", SACCT_FILES)
def test_sacct_documents_read_in_small_blocks_give_the_same_events(name: str) -> None:
    whole = parse_document(str(HERE / name)).collect()
    for block in (64, 150, 333):  # headers, dashes and rows fall on block edges
        assert parse_document(str(HERE / name), block_bytes=block).collect().equals(whole)


def test_sacct_table_ends_at_the_first_line_that_is_not_a_row(tmp_path: Path) -> None:
    f = tmp_path / "sacct.txt"
    f.write_text("JobID|State|End\n1|FAILED|2024-01-01T00:00:00\n\n2|FAILED|2024-01-01T00:00:00\n"
                 "$ echo done\n3|FAILED|2024-01-01T00:00:00\n")
    ev = read_document_events(str(f), parser).events
    assert ev["job_id"].to_list() == ["1", "2"]  # blank lines are skipped, the shell prompt ends the table


@pytest.mark.parametrize(
    ("cell", "state"),
    [("OUT_OF_ME+", "OUT_OF_MEMORY"), ("CANCELLED+", "CANCELLED"), ("COMPLET+", "COMPLETED"), ("NODE_FA+", "NODE_FAIL"),
     ("CANCELLED by 0", "CANCELLED"), ("TIMEOUT", "TIMEOUT"), ("completed", "COMPLETED")],
)
def test_state_cells_normalize(cell: str, state: str) -> None:
    assert pl.DataFrame({"s": [cell]}).select(normalize_state(pl.col("s")))[0, 0] == state


def test_sacct_step_names_do_not_pose_as_job_names() -> None:
    ev = _doc(HERE / "sacct_fixed_width_timeout_cancel_oom_array_het.txt")
    step = ev.filter(pl.col("message").str.starts_with("JobID=4242.batch ")).row(0, named=True)
    assert "StepName=batch" in step["message"] and "JobName=" not in step["message"]


def test_sacct_table_inside_a_job_log() -> None:
    path = HERE / "job_out_with_epilog_sacct.out"
    assert not parser.sniff(read_head(str(path)).decode())  # a job log, not a sacct document
    res = read_text_events(str(path), [parser])
    ev = _classified(res.events)
    assert ev.filter(pl.col("kind") == "job_end").select("line", "job_id", "state", "failure_class").rows() == [
        (5, "8001", "FAILED", "software"),  # STEP banner DUE TO TASK FAILURE
        (15, "8001", "FAILED", "software"),  # sacct row 8001.0 (no End column: time unknown)
    ]
    table = ev.filter(pl.col("kind") == "info").row(0, named=True)
    assert (table["line"], table["line_end"]) == (10, 15)
    assert res.covered == res.lines - 3  # the shell trace lines and the trainer line are not ours


SNIFF_YES = [
    "JobID|State|ExitCode\n1|COMPLETED|0:0\n",
    "JobID|JobName|State|ExitCode|\n1|x|FAILED|1:0|\n",
    "       JobID    JobName      State ExitCode \n------------ ---------- ---------- -------- \n",
    "\n$ sacct -j 1 -o jobid,state\n       JobID      State \n------------ ---------- \n1             COMPLETED \n",
    "JobIDRaw|Start|End\n1|2024-01-01T00:00:00|2024-01-01T00:01:00\n",
]
SNIFF_NO = [
    "",
    "random words\nmore words\n",
    "JobID State ExitCode\n1 COMPLETED 0:0\n",  # whitespace header without the dashes line
    "JobName|Partition\nx|gpu\n",  # no job id column
    "JobID|State|Frobnicate\n",  # not a sacct field
    "slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2024-01-01T00:00:00 ***\n",
    " iteration 10/ 100 | consumed samples: 10 | elapsed time per iteration (ms): 1.0 |\n",
]


@pytest.mark.parametrize("head", SNIFF_YES)
def test_sniff_claims_sacct_tables(head: str) -> None:
    assert parser.sniff(head)


@pytest.mark.parametrize("head", SNIFF_NO)
def test_sniff_refuses_other_text(head: str) -> None:
    assert not parser.sniff(head)


def test_parse_of_a_text_log_falls_back_to_line_rules() -> None:
    lf = parser.parse(str(REAL / "tr141_exp6_iter2500_validation_then_node_failure_iam37.log"))
    df = lf.collect()
    assert df["kind"].to_list() == ["error", "warning", "job_end"]


# ---------------------------------------------------------------- hostlists

def _expand(hostlist: str) -> int:
    """Reference count by explicit expansion (test oracle)."""
    n = 0
    for item in _split_top(hostlist):
        if "[" not in item:
            n += 1
            continue
        inner = item[item.index("[") + 1 : item.index("]")]
        for part in inner.split(","):
            lo, _, hi = part.partition("-")
            n += int(hi) - int(lo) + 1 if hi else 1
    return n


def _split_top(hostlist: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in hostlist:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur]


@pytest.mark.parametrize(
    ("hosts", "n", "one"),
    [
        ("jean-zay-iam[01-34,36-49]", 48, None),
        ("node01", 1, "node01"),
        ("gpu[009]", 1, "gpu009"),
        ("a[1-2],b[3],c", 4, None),
        ("n[001-004],m01", 5, None),
        ("None assigned", None, None),
        ("(null)", None, None),
    ],
)
def test_hostlist_count(hosts: str, n: int | None, one: str | None) -> None:
    h = pl.col("h")
    df = pl.DataFrame({"h": [hosts]}).select(hostlist_count(h).alias("n"), single_host(h).alias("o"))
    assert df.row(0) == (n, one)


_RANGE = st.tuples(st.integers(0, 500), st.integers(0, 40)).map(lambda t: (t[0], t[0] + t[1]))


@st.composite
def _hostlists(draw: st.DrawFn) -> str:
    items = []
    for prefix in draw(st.lists(st.sampled_from(["gpu", "node-a", "r6i4n", "x"]), min_size=1, max_size=3)):
        if draw(st.booleans()):
            items.append(f"{prefix}{draw(st.integers(0, 99))}")
        else:
            ranges = draw(st.lists(_RANGE, min_size=1, max_size=4))
            parts = [f"{lo:03d}-{hi:03d}" if hi > lo else f"{lo:03d}" for lo, hi in ranges]
            items.append(f"{prefix}[{','.join(parts)}]")
    return ",".join(items)


@settings(max_examples=80, deadline=None)
@given(_hostlists())
def test_hostlist_count_matches_expansion(hosts: str) -> None:
    got = pl.DataFrame({"h": [hosts]}).select(hostlist_count(pl.col("h")))[0, 0]
    assert got == _expand(hosts)


# ---------------------------------------------------------------- properties

_SLURMISH = st.sampled_from([
    "srun: error: ", "slurmstepd: error: *** JOB ", "*** STEP ", " CANCELLED AT ", " DUE TO ", "JobId=", "[",
    "]", "|", "sacct", "Nodes ", " not responding", "Detected ", " oom-kill event(s) in StepId=", "PULSE: ",
    "ALERT:", "task ", ": ", "0", "12", "-", ".", "gpu[01-02]", "\t", "  ", "CANCELLED", "JobID", "State",
])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=60), st.lists(_SLURMISH, max_size=12).map("".join)), min_size=1,
                max_size=12))
def test_extract_never_raises_and_returns_the_raw_schema(lines: list[str]) -> None:
    out = parser.extract(lines_from_strings(lines).lazy())
    validate_raw(out, "slurm")
    df = out.collect()
    assert set(df["kind"].unique().to_list()) <= set(KINDS)
    assert set(df["severity"].unique().to_list()) <= set(SEVERITIES)
    assert df["line"].null_count() == 0 and df["message"].null_count() == 0


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400))
def test_sniff_never_raises(head: str) -> None:
    assert parser.sniff(head) in (True, False)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(1, 10**7),
            st.sampled_from(["", ".batch", ".extern", ".0", "_3", "_3.1"]),
            st.sampled_from(["COMPLETED", "FAILED", "TIMEOUT", "CANCELLED by 12", "NODE_FAIL", "OUT_OF_MEMORY"]),
            st.integers(-2, 255),
        ),
        min_size=1,
        max_size=8,
    ),
    trailing=st.booleans(),
)
def test_parsable_tables_round_trip(rows: list[tuple[int, str, str, int]], trailing: bool, tmp_path_factory) -> None:
    end = "|" if trailing else ""
    text = "JobID|State|ExitCode|End" + end + "\n" + "".join(
        f"{j}{s}|{state}|{code}:0|2024-01-01T00:00:00{end}\n" for j, s, state, code in rows
    )
    f = tmp_path_factory.mktemp("sacct") / "t.txt"
    f.write_text(text)
    ev = read_document_events(str(f), parser).events
    assert ev.height == len(rows)  # one job_end per row (no Start / Submit columns)
    for (j, s, state, code), row in zip(rows, ev.iter_rows(named=True), strict=True):
        assert row["job_id"] == f"{j}{s.split('.')[0]}"
        assert row["state"] == state.split()[0]
        assert row["code"] == str(code)
        assert row["message"].startswith(f"JobID={j}{s} ")


def _cell(value: str, width: int, left: bool) -> str:
    """A cell as sacct prints it: cut to the width with a trailing '+', then padded."""
    if len(value) > width:
        value = value[: width - 1] + "+"
    return value.ljust(width) if left else value.rjust(width)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(1, 10**7),
            st.sampled_from(["", ".batch", ".0", "_12"]),
            st.sampled_from(["COMPLETED", "FAILED", "TIMEOUT", "CANCELLED by 12", "NODE_FAIL", "OUT_OF_MEMORY"]),
        ),
        min_size=1,
        max_size=6,
    ),
    widths=st.tuples(st.integers(12, 20), st.integers(9, 20)),
    left=st.booleans(),
)
def test_fixed_width_tables_round_trip(rows: list[tuple[int, str, str]], widths: tuple[int, int], left: bool,
                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    wj, ws = widths
    names = [("JobID", wj), ("State", ws), ("ExitCode", 8), ("End", 19)]
    lines = [" ".join(_cell(n, w, left) for n, w in names) + " ", " ".join("-" * w for _, w in names) + " "]
    for j, suffix, state in rows:
        cells = [f"{j}{suffix}", state, "0:0", "2024-01-01T00:00:00"]
        lines.append(" ".join(_cell(c, w, left or k == 0) for k, (c, (_, w)) in enumerate(zip(cells, names, strict=True))) + " ")
    f = tmp_path_factory.mktemp("sacct") / "t.txt"
    f.write_text("\n".join(lines) + "\n")
    ev = _doc(f)
    assert ev.height == len(rows)
    for (j, suffix, state), row in zip(rows, ev.iter_rows(named=True), strict=True):
        assert row["job_id"] == f"{j}{suffix.split('.')[0]}"
        # A cut state resolves to the known state it is a prefix of.
        assert row["state"] == state.split()[0]
        assert row["ts"] == datetime(2024, 1, 1)


def test_every_rule_is_a_slurm_rule() -> None:
    assert all(r.id.startswith("slurm-") and r.source == ("slurm",) for r in RULES)
    assert len({r.id for r in RULES}) == len(RULES)
