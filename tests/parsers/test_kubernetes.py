"""kubernetes parser: kubectl renderings, API documents, klog and training-operator lines.

There are no Kubernetes captures among the real logs, so the fixtures under
tests/data/kubernetes are built in the exact shapes kubectl, the API server, the
control-plane components and the training operator print; the real logs copied
under real/ check that the line rules stay silent on other families.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toranalyze_parsers.kubernetes import KubernetesParser, parser

from tests.conftest import DATA, assert_golden, extract_lines, parse_file
from toranalyze.ingest.classify import classify, load_rules
from toranalyze.ingest.reader import read_document_events, read_text_events
from toranalyze.ingest.registry import default_registry
from toranalyze.ingest.streams import read_head
from toranalyze.schema import KINDS, RAW_SCHEMA, SEVERITIES, validate_kinds

K8S = DATA / "kubernetes"
REAL = K8S / "real"
GOLDEN = K8S / "golden"
FIXTURES = sorted(p for p in K8S.iterdir() if p.is_file())
_RULES = load_rules()


def classified(frame: pl.DataFrame) -> pl.DataFrame:
    return classify(frame.with_columns(pl.lit("kubernetes").alias("source")), _RULES).collect()


def read(path: Path, p: KubernetesParser = parser) -> pl.DataFrame:
    """What the pipeline does: documents the parser claims are parsed whole, the rest line by line."""
    if p.sniff(read_head(str(path)).decode()):
        return read_document_events(str(path), p).events
    return parse_file(p, path)


def rows(frame: pl.DataFrame, **where: object) -> list[dict]:
    out = frame
    for col, value in where.items():
        out = out.filter(pl.col(col) == value)
    return out.to_dicts()


def only(frame: pl.DataFrame, **where: object) -> dict:
    found = rows(frame, **where)
    assert len(found) == 1, found
    return found[0]


# --- goldens and coverage -------------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixture_golden(path: Path) -> None:
    assert_golden(read(path), GOLDEN / f"{path.name}.json")


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_every_fixture_is_understood(path: Path) -> None:
    head = read_head(str(path)).decode()
    result = read_document_events(str(path), parser) if parser.sniff(head) else read_text_events(str(path), [parser])
    assert result.events.height > 0
    uncovered = result.lines - result.covered
    # Text logs keep a few lines nobody records (a ranked-pods list, a PLEG error).
    assert uncovered <= 2, (result.lines, result.covered)


@pytest.mark.parametrize("path", sorted(REAL.glob("*.log")), ids=lambda p: p.stem)
def test_real_logs_of_other_families_stay_silent(path: Path) -> None:
    assert not parser.sniff(read_head(str(path)).decode(errors="replace"))
    result = read_text_events(str(path), [parser])
    assert result.events.height == 0
    assert result.covered == 0


def test_registered_as_a_plugin() -> None:
    assert default_registry().get("kubernetes") is parser
    assert parser.source == "kubernetes"


# --- kubectl get events tables --------------------------------------------------------------------


def test_get_events_rows_keep_the_age_and_have_no_time_without_anchor() -> None:
    ev = classified(read(K8S / "get_events.txt"))
    assert ev.height == 14 and ev["ts"].null_count() == 14
    backoff = only(ev, state="BackOff")
    assert backoff["line"] == 11
    assert backoff["job_id"] == "llama-pretrain"
    assert backoff["message"].startswith("BackOff: Back-off restarting failed container pytorch")
    assert backoff["message"].endswith("(age 20m)")
    assert backoff["failure_class"] == "software"
    assert only(ev, state="Scheduled")["node"] == "gpu-node-03"
    oom = only(ev, state="OOMKilling")
    assert (oom["kind"], oom["node"], oom["failure_class"]) == ("error", "gpu-node-04", "oom_host")
    exited = only(ev, state="ExitedWithCode")
    assert (exited["code"], exited["failure_class"]) == ("137", None)
    restart = only(ev, state="PyTorchJobRestarting")
    assert (restart["kind"], restart["failure_class"]) == ("restart", None)
    failed = only(ev, state="PyTorchJobFailed")
    assert (failed["kind"], failed["severity"], failed["failure_class"]) == ("job_end", "error", "software")
    assert only(ev, state="PyTorchJobCreated")["kind"] == "job_submit"


def test_get_events_with_anchor_places_rows_at_capture_minus_age() -> None:
    anchored = KubernetesParser(anchor=datetime(2024, 3, 14, 10, 30))
    ev = read(K8S / "get_events.txt", anchored)
    node = only(ev, state="NodeNotReady", node="gpu-node-05")
    assert node["ts"] == datetime(2024, 3, 14, 10, 20, 4)
    assert (node["ts_offset_s"], node["ts_inferred"]) == (0, True)
    assert only(ev, state="PyTorchJobFailed")["ts"] == datetime(2024, 3, 14, 10, 26, 59)
    assert only(ev, state="PyTorchJobCreated")["ts"] == datetime(2024, 3, 14, 9, 38)


def test_node_not_ready_on_a_pod_is_an_error_of_that_pod() -> None:
    ev = classified(read(K8S / "get_events.txt"))
    pod = only(ev, state="NodeNotReady", kind="error")
    assert pod["job_id"] == "llama-pretrain" and pod["node"] is None
    assert pod["failure_class"] == "node_failure"
    assert only(ev, state="NodeNotReady", kind="node_state")["node"] == "gpu-node-05"


def test_taint_eviction_after_node_not_ready_is_a_node_failure() -> None:
    ev = classified(read(K8S / "get_events.txt"))
    eviction = only(ev, state="TaintManagerEviction")
    assert (eviction["failure_class"], eviction["rule"]) == ("node_failure", "kubernetes-taint-eviction-not-ready")
    # without the NodeNotReady of that pod in the capture it stays a preemption
    alone = classified(extract_lines(parser, [(K8S / "get_events.txt").read_text().splitlines()[13]]))
    assert alone.row(0, named=True)["failure_class"] == "preemption"


def test_get_events_all_namespaces() -> None:
    ev = read(K8S / "get_events_all_namespaces.txt")
    assert ev.height == 6
    probe = only(ev, state="Unhealthy")
    assert (probe["kind"], probe["severity"]) == ("warning", "warning")
    assert probe["message"].startswith('Unhealthy: Liveness probe failed: Get "http://10.244.4.12:9400/health"')


def test_get_events_wide_takes_host_from_source_and_the_count() -> None:
    ev = read(K8S / "get_events_wide.txt")
    assert ev.height == 14
    backoff = only(ev, state="BackOff")
    assert backoff["node"] == "gpu-node-04"
    assert "(x2)" in backoff["message"]
    # the message column stops before FIRST SEEN / COUNT / NAME
    assert "17bc6ca5e3c1d802" not in backoff["message"]
    assert only(ev, state="Started")["node"] == "gpu-node-03"
    assert "(x3)" in only(ev, state="FailedScheduling")["message"]


def test_get_events_kubectl_1_13_layout() -> None:
    ev = read(K8S / "get_events_v1_13.txt")
    assert ev.height == 10
    backoff = only(ev, state="BackOff")
    assert (backoff["node"], backoff["job_id"]) == ("gpu-node-04", "llama-pretrain")
    assert only(ev, state="OOMKilling")["node"] == "gpu-node-04"


def test_kubectl_events_interval_with_repeat_count() -> None:
    ev = read(K8S / "kubectl_events.txt")
    assert ev.height == 14
    sched = only(ev, state="FailedScheduling")
    assert sched["message"].endswith("[pod/llama-pretrain-worker-2] (x3) (age 51m (x3 over 52m))")
    anchored = read(K8S / "kubectl_events.txt", KubernetesParser(anchor=datetime(2024, 3, 14, 10, 30)))
    # the last-seen age places the row
    assert only(anchored, state="FailedScheduling")["ts"] == datetime(2024, 3, 14, 9, 39)


def test_old_tabbed_table_and_describe_rows_without_header() -> None:
    ev = extract_lines(
        parser,
        [
            "13m        13m         1         llama-pretrain-worker-2   Pod                                   "
            "         Normal    Scheduled           {default-scheduler }                     Successfully assigned "
            "llama-pretrain-worker-2 to gpu-node-03",
            "13m        13m         1         llama-pretrain-worker-2   Pod          spec.containers{pytorch}   "
            "         Normal    Pulled              {kubelet gpu-node-03}   Successfully pulled image \"nvcr.io/x\"",
        ],
    )
    assert ev["state"].to_list() == ["Scheduled", "Pulled"]
    assert ev["node"].to_list() == ["gpu-node-03", "gpu-node-03"]


# --- kubectl get pods / get nodes ----------------------------------------------------------------


def test_get_pods_wide_snapshot() -> None:
    ev = classified(read(K8S / "get_pods_wide.txt"))
    assert ev.height == 7 and ev["ts"].null_count() == 7
    crash = only(ev, state="CrashLoopBackOff")
    assert (crash["attempt"], crash["node"], crash["job_id"], crash["failure_class"]) == (
        1,
        "gpu-node-04",
        "llama-pretrain",
        "software",
    )
    assert "last 20m ago" in crash["message"]
    oom = only(ev, state="OOMKilled")
    assert (oom["kind"], oom["node"], oom["failure_class"]) == ("error", "gpu-node-07", "oom_host")
    pending = only(ev, state="Pending")
    assert pending["node"] is None and pending["failure_class"] == "scheduling"
    # healthy pods are context, never a state change
    assert {r["kind"] for r in rows(ev, state="Running")} == {"info"}


def test_get_pods_all_namespaces_with_anchor() -> None:
    anchored = KubernetesParser(anchor=datetime(2024, 3, 14, 10, 30))
    ev = classified(read(K8S / "get_pods_all_namespaces.txt", anchored))
    init = only(ev, line=5)
    assert (init["state"], init["attempt"]) == ("CrashLoopBackOff", 3)
    assert init["ts"] == datetime(2024, 3, 14, 10, 29, 19) and init["ts_inferred"]  # capture - '41s ago'
    evicted = only(ev, state="Evicted")
    assert evicted["ts"] == datetime(2024, 3, 14, 10, 30) and evicted["failure_class"] == "preemption"
    assert only(ev, state="Completed")["job_id"] == "eval-sweep"


def test_get_nodes_snapshot() -> None:
    ev = classified(read(K8S / "get_nodes.txt"))
    lost = only(ev, node="gpu-node-05")
    assert (lost["kind"], lost["state"], lost["failure_class"]) == ("node_state", "NotReady", "node_failure")
    cordoned = only(ev, node="gpu-node-09")
    assert (cordoned["state"], cordoned["failure_class"]) == ("SchedulingDisabled", "maintenance")
    assert {r["kind"] for r in rows(ev, state="Ready")} == {"info"}


# --- kubectl describe -----------------------------------------------------------------------------


def test_describe_pod_last_state_oomkilled() -> None:
    ev = classified(read(K8S / "describe_pod_oomkilled.txt"))
    end = only(ev, kind="job_end", state="OOMKilled")
    assert (end["line"], end["line_end"]) == (58, 62)
    assert end["ts"] == datetime(2024, 3, 14, 10, 9, 1) and end["ts_offset_s"] == 0
    assert (end["code"], end["attempt"], end["node"], end["job_id"]) == ("137", 0, "gpu-node-04", "llama-pretrain")
    assert end["failure_class"] == "oom_host"
    start = only(ev, kind="job_start", line=61)
    assert start["ts"] == datetime(2024, 3, 14, 9, 39, 12)
    waiting = only(ev, state="CrashLoopBackOff")
    assert (waiting["attempt"], waiting["line"], waiting["line_end"]) == (1, 56, 57)
    init = only(ev, kind="job_end", state="Completed")
    assert (init["severity"], init["code"], init["failure_class"]) == ("info", "0", None)


def test_describe_termination_message_with_the_programs_last_lines() -> None:
    ev = classified(read(K8S / "describe_pod_termination_message.txt"))
    end = only(ev, kind="job_end", state="Error")
    # the traceback lines (some at column 0) stay inside the Last State block
    assert (end["line"], end["line_end"], end["code"], end["attempt"]) == (58, 69, "1", 0)
    assert end["ts"] == datetime(2024, 3, 14, 10, 9, 1)
    assert "| torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB." in end["message"]
    assert (end["failure_class"], end["rule"]) == ("oom_gpu", "kubernetes-termination-cuda-oom")


def test_describe_pod_events_table_with_aggregated_counts() -> None:
    ev = read(K8S / "describe_pod_oomkilled.txt")
    backoff = only(ev, state="BackOff")
    assert backoff["line"] == 109 and backoff["ts"] is None
    assert backoff["message"].endswith("(age 20m (x2 over 20m))")
    # the pod's node and job come from its describe block
    assert (backoff["node"], backoff["job_id"]) == ("gpu-node-04", "llama-pretrain")
    assert only(ev, state="Scheduled")["node"] == "gpu-node-04"


def test_describe_evicted_pod() -> None:
    ev = classified(read(K8S / "describe_pod_evicted.txt"))
    status = only(ev, line=13)
    assert (status["kind"], status["state"], status["job_id"], status["node"]) == (
        "error",
        "Evicted",
        "bert-finetune",
        "gpu-node-09",
    )
    assert status["message"].startswith("Evicted: The node was low on resource: memory.")
    # Evicted because the node ran out of memory: the cause is host memory, not a planned preemption.
    assert status["failure_class"] == "oom_host" and status["rule"] == "kubernetes-evicted-memory"
    unknown = only(ev, state="ContainerStatusUnknown")
    # describe prints the zero time as 'Mon, 01 Jan 0001': no time rather than year 1
    assert unknown["ts"] is None and unknown["code"] == "137" and unknown["failure_class"] is None


def test_describe_nodes_conditions_cordon_and_events() -> None:
    ev = classified(read(K8S / "describe_nodes.txt"))
    lost = only(ev, line=22)
    assert (lost["kind"], lost["state"], lost["node"]) == ("node_state", "NotReady", "gpu-node-05")
    assert lost["ts"] == datetime(2024, 3, 14, 10, 20, 4)
    assert lost["failure_class"] == "node_failure"
    pleg = only(ev, line=62)
    assert pleg["message"].startswith("Ready=False KubeletNotReady: PLEG is not healthy")
    assert pleg["ts"] == datetime(2024, 3, 14, 7, 51, 33)
    pressure = only(ev, state="MemoryPressure")
    assert (pressure["severity"], pressure["failure_class"]) == ("warning", None)
    cordon = only(ev, state="SchedulingDisabled")
    assert (cordon["node"], cordon["failure_class"]) == ("gpu-node-09", "maintenance")
    assert only(ev, state="NodeNotSchedulable")["failure_class"] == "maintenance"
    assert only(ev, state="NodeNotReady", node="gpu-node-09")["line"] == 71
    # conditions that are fine (DiskPressure False ...) are not events
    assert not rows(ev, state="DiskPressure")


def test_describe_pytorchjob_conditions_and_events() -> None:
    ev = classified(read(K8S / "describe_pytorchjob.txt"))
    assert set(ev["job_id"]) == {"llama-pretrain"}
    submit = only(ev, kind="job_submit")
    assert (submit["line"], submit["line_end"], submit["ts"]) == (42, 47, datetime(2024, 3, 14, 9, 38))
    assert only(ev, kind="job_start")["ts"] == datetime(2024, 3, 14, 9, 38, 1)  # Status.Start Time
    failed = only(ev, kind="job_end", line=60)
    assert (failed["state"], failed["ts"], failed["failure_class"]) == (
        "PyTorchJobFailed",
        datetime(2024, 3, 14, 10, 26, 59),
        "software",
    )
    # conditions with Status False (Restarting, Running) are no events; the Events table still has the restart
    assert only(ev, kind="restart")["line"] == 81
    assert only(ev, state="ExitedWithCode")["message"].endswith("[pytorchjob/llama-pretrain] (age 20m)")


def test_describe_pod_relative_lines_inside_a_longer_log() -> None:
    text = (K8S / "describe_pod_oomkilled.txt").read_text().splitlines()
    ev = extract_lines(parser, ["+ kubectl describe pod llama-pretrain-worker-3 -n train", *text])
    assert only(ev, kind="job_end", state="OOMKilled")["line"] == 59


# --- API documents --------------------------------------------------------------------------------


def test_event_list_json() -> None:
    ev = classified(read(K8S / "events_list.json"))
    assert ev.height == 10
    backoff = only(ev, state="BackOff")
    assert backoff["ts"] == datetime(2024, 3, 14, 10, 9, 40)  # lastTimestamp
    assert (backoff["ts_offset_s"], backoff["ts_inferred"]) == (0, False)
    assert (backoff["line"], backoff["line_end"]) == (190, 222)
    assert backoff["node"] == "gpu-node-04"  # source.host
    assert "(x2)" in backoff["message"]
    node = only(ev, state="NodeNotReady")
    assert (node["node"], node["failure_class"]) == ("gpu-node-05", "node_failure")
    assert only(ev, state="TaintManagerEviction")["failure_class"] == "preemption"


def test_event_list_yaml_matches_json() -> None:
    cols = ["ts", "kind", "severity", "node", "job_id", "code", "state", "message"]
    as_json = read(K8S / "events_list.json").select(cols)
    as_yaml = read(K8S / "events_list.yaml")
    assert as_yaml.select(cols).equals(as_json)
    created = only(as_yaml, state="PyTorchJobCreated")
    assert (created["line"], created["line_end"]) == (3, 28)


def test_watch_streams() -> None:
    pretty = read(K8S / "events_watch.json")
    assert pretty["state"].to_list() == ["BackOff", "NodeNotReady", "TaintManagerEviction"]
    assert pretty["line"].to_list() == [1, 34, 64]
    envelopes = read(K8S / "events_watch_envelopes.jsonl")
    # the last envelope was cut by a dropped connection and is skipped
    assert envelopes["state"].to_list() == ["OOMKilling", "ExitedWithCode", "PyTorchJobRestarting"]
    assert envelopes["line"].to_list() == [1, 2, 3]


def test_events_k8s_io_v1_list_without_item_kinds() -> None:
    ev = read(K8S / "events_k8s_io_v1.json")
    assert ev["state"].to_list() == ["Scheduled", "BackOff", "NodeNotReady"]
    backoff = only(ev, state="BackOff")
    assert backoff["ts"] == datetime(2024, 3, 14, 10, 9, 40, 402113)  # series.lastObservedTime
    assert backoff["node"] == "gpu-node-04"  # deprecatedSource.host
    assert "(x2)" in backoff["message"]
    assert only(ev, state="Scheduled")["ts"] == datetime(2024, 3, 14, 9, 39, 10, 114287)  # eventTime


def test_pod_json_last_state_and_waiting() -> None:
    ev = classified(read(K8S / "pod_oomkilled.json"))
    end = only(ev, kind="job_end", state="OOMKilled")
    assert (end["ts"], end["code"], end["attempt"]) == (datetime(2024, 3, 14, 10, 9, 1), "137", 0)
    assert (end["line"], end["line_end"]) == (85, 91)
    assert (end["node"], end["job_id"], end["failure_class"]) == ("gpu-node-04", "llama-pretrain", "oom_host")
    start = only(ev, kind="job_start", attempt=0, line=85)
    assert start["ts"] == datetime(2024, 3, 14, 9, 39, 12)
    waiting = only(ev, state="CrashLoopBackOff")
    assert waiting["attempt"] == 1 and "back-off 10s restarting failed container=pytorch" in waiting["message"]


def test_oomkilled_with_exit_code_zero_is_still_oom() -> None:
    ev = classified(read(K8S / "pods_list.yaml"))
    end = only(ev, kind="job_end", state="OOMKilled")
    assert (end["code"], end["severity"], end["failure_class"]) == ("0", "error", "oom_host")


def test_pod_list_evicted_unschedulable_nominated() -> None:
    ev = classified(read(K8S / "pods_list.yaml"))
    evicted = only(ev, state="Evicted")
    # the time comes from the DisruptionTarget condition
    assert evicted["ts"] == datetime(2024, 3, 13, 22, 14, 2)
    assert (evicted["job_id"], evicted["node"]) == ("bert-finetune", "gpu-node-09")
    assert evicted["failure_class"] == "oom_host"  # low on memory
    disruption = only(ev, state="TerminationByKubelet")
    assert disruption["failure_class"] == "oom_host"  # the kubelet acted on memory pressure
    pending = only(ev, state="Unschedulable")
    assert (pending["kind"], pending["failure_class"]) == ("warning", "scheduling")
    assert pending["ts"] == datetime(2024, 3, 14, 10, 27, 40)
    nominated = only(ev, kind="info")
    assert nominated["node"] == "gpu-node-08" and "nominated" in nominated["message"]


def test_node_list_conditions() -> None:
    ev = classified(read(K8S / "nodes_list.yaml"))
    lost = only(ev, state="NotReady")
    assert (lost["node"], lost["failure_class"]) == ("gpu-node-05", "node_failure")
    assert lost["ts"] == datetime(2024, 3, 14, 10, 20, 4)
    ro = only(ev, state="ReadonlyFilesystem")
    assert (ro["node"], ro["failure_class"]) == ("gpu-node-09", "storage")
    cordon = only(ev, state="SchedulingDisabled")
    assert cordon["ts"] == datetime(2024, 3, 14, 7, 58, 30)  # the unschedulable taint's timeAdded
    assert only(ev, state="Ready")["severity"] == "info"
    # NetworkUnavailable=False and KernelDeadlock=False are healthy: no rows
    assert not rows(ev, state="NetworkUnavailable") and not rows(ev, state="KernelDeadlock")


def test_pytorchjob_failed_yaml() -> None:
    ev = classified(read(K8S / "pytorchjob_failed.yaml"))
    submit = only(ev, kind="job_submit")
    assert (submit["n_gpus"], submit["ts"], submit["job_id"]) == (64, datetime(2024, 3, 14, 9, 38), "llama-pretrain")
    assert only(ev, kind="job_start")["ts"] == datetime(2024, 3, 14, 9, 38, 1)
    end = only(ev, kind="job_end")
    assert (end["state"], end["failure_class"]) == ("PyTorchJobFailed", "software")
    assert end["ts"] == datetime(2024, 3, 14, 10, 26, 59)
    # Running=False is not a start
    assert len(rows(ev, kind="job_start")) == 1


def test_pytorchjob_restarting_json() -> None:
    ev = classified(read(K8S / "pytorchjob_restarting.json"))
    restart = only(ev, kind="restart")
    assert (restart["state"], restart["ts"], restart["failure_class"]) == (
        "PyTorchJobRestarting",
        datetime(2024, 3, 14, 10, 9, 3),
        None,
    )
    assert not rows(ev, kind="job_end")


def test_batch_job_deadline_is_walltime() -> None:
    ev = classified(read(K8S / "batch_job_deadline.yaml"))
    end = only(ev, kind="job_end")
    assert (end["state"], end["failure_class"], end["job_id"]) == ("DeadlineExceeded", "walltime", "eval-sweep")


def test_events_take_job_and_node_from_pods_in_the_same_document() -> None:
    ev = classified(read(K8S / "pods_and_events.yaml"))
    lost = only(ev, state="NodeLost")
    assert (lost["job_id"], lost["node"], lost["failure_class"]) == ("gpt-small-eval", "gpu-node-05", "node_failure")
    # the events name only the pod: its node comes from the pod in the same list
    for state in ("NodeNotReady", "TaintManagerEviction"):
        row = only(ev, state=state)
        assert (row["job_id"], row["node"], row["failure_class"]) == ("gpt-small-eval", "gpu-node-05", "node_failure")


def test_broken_yaml_keeps_earlier_documents(tmp_path: Path) -> None:
    good = (K8S / "pytorchjob_failed.yaml").read_text()
    path = tmp_path / "dump.yaml"
    path.write_text(good + "---\nkind: Pod\nmetadata: {name: [unclosed\n")
    ev = read(path)
    assert only(ev, kind="job_end")["state"] == "PyTorchJobFailed"


# --- component and operator logs ------------------------------------------------------------------


def test_scheduler_klog() -> None:
    ev = classified(read(K8S / "kube_scheduler.log"))
    failed = only(ev, state="FailedScheduling")
    assert failed["ts"] == datetime(2000, 3, 14, 9, 38, 2, 418872) and failed["ts_year_known"] is False
    assert failed["message"].startswith("FailedScheduling: 0/8 nodes are available: 1 Insufficient nvidia.com/gpu")
    assert (failed["job_id"], failed["failure_class"]) == ("llama-pretrain", "scheduling")
    bound = rows(ev, state="Scheduled")
    assert [r["node"] for r in bound] == ["gpu-node-01", "gpu-node-03"]
    legacy = read(K8S / "kube_scheduler_v1_18.log")
    assert legacy["state"].to_list() == ["FailedScheduling", "Scheduled"]
    assert legacy["node"].to_list() == [None, "gpu-node-06"]


def test_controller_manager_cri_prefix_zone_wins_over_klog_stamp() -> None:
    ev = classified(read(K8S / "kube_controller_manager.cri.log"))
    first = only(ev, line=1)
    # the CRI stamp says +08:00; the klog stamp (UTC, no year) on the same line is 8 h earlier
    assert (first["ts"], first["ts_offset_s"], first["ts_year_known"]) == (
        datetime(2024, 3, 14, 18, 20, 4, 118231),
        28800,
        True,
    )
    assert (first["state"], first["node"], first["failure_class"]) == ("NodeNotReady", "gpu-node-05", "node_failure")
    occurred = only(ev, line=3)
    assert (occurred["kind"], occurred["job_id"]) == ("error", "llama-pretrain")
    evictions = rows(ev, state="TaintManagerEviction")
    assert [r["line"] for r in evictions] == [5, 6]
    # the same capture shows the pod's node going NotReady: a node failure, not a preemption
    assert {r["failure_class"] for r in evictions} == {"node_failure"}
    assert evictions[1]["message"].endswith("[pod/llama-pretrain-worker-4] (its node was NotReady)")


def test_controller_manager_legacy_event_lines() -> None:
    ev = read(K8S / "kube_controller_manager_v1_17.log")
    assert ev["line"].to_list() == [1, 3, 4, 5]
    assert ev["state"].to_list() == ["NodeNotReady", "NodeNotReady", "NodeNotReady", "TaintManagerEviction"]
    assert ev["node"].to_list()[:2] == ["gpu-node-05", "gpu-node-05"]


def test_kubelet_syslog() -> None:
    ev = classified(read(K8S / "kubelet.syslog"))
    assert set(ev["node"]) == {"gpu-node-09"}  # from the syslog host
    assert only(ev, state="Evicted")["job_id"] == "bert-finetune"
    assert [r["line"] for r in rows(ev, state="NodeNotReady")] == [5, 6]
    assert only(ev, state="SystemOOM")["failure_class"] == "oom_host"


def test_docker_json_file_wrapper() -> None:
    line = (
        '{"log":"I0901 00:25:09.311469       1 event.go:291] \\"Event occurred\\" '
        'object=\\"train/llama-pretrain-worker-4\\" kind=\\"Pod\\" apiVersion=\\"v1\\" type=\\"Warning\\" '
        'reason=\\"NodeNotReady\\" message=\\"Node is not ready\\"\\n",'
        '"stream":"stderr","time":"2021-09-01T00:25:09.311544102Z"}'
    )
    row = extract_lines(parser, [line]).row(0, named=True)
    assert (row["state"], row["job_id"], row["message"]) == (
        "NodeNotReady",
        "llama-pretrain",
        "NodeNotReady: Node is not ready [pod/llama-pretrain-worker-4]",
    )
    assert (row["ts"], row["ts_offset_s"]) == (datetime(2021, 9, 1, 0, 25, 9, 311544), 0)


def test_training_operator_logrus_and_zap() -> None:
    ev = classified(read(K8S / "training_operator.log"))
    assert ev["line"].to_list() == [1, 3, 5, 6, 7, 8, 9]
    assert ev["kind"].to_list() == ["job_submit", "error", "restart", "restart", "job_start", "job_end", "job_end"]
    exited = only(ev, line=3)
    assert (exited["code"], exited["job_id"]) == ("137", "llama-pretrain")
    assert exited["ts"] == datetime(2024, 3, 14, 10, 9, 2)
    zap_iso = only(ev, line=5)
    assert (zap_iso["ts"], zap_iso["ts_offset_s"]) == (datetime(2024, 3, 14, 10, 9, 3, 114000), 0)
    zap_epoch = only(ev, line=7)
    assert zap_epoch["ts"] == datetime(2024, 3, 14, 10, 9, 40, 4200) and zap_epoch["ts_offset_s"] == 0
    assert only(ev, line=6)["state"] == "PyTorchJobRestarting"  # the logged event's reason field
    failed = only(ev, line=8)
    assert (failed["state"], failed["failure_class"]) == ("PyTorchJobFailed", "software")
    done = only(ev, line=9)
    assert (done["state"], done["job_id"], done["severity"]) == ("PyTorchJobSucceeded", "gpt-small-eval", "info")


# --- rules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "klass"),
    [
        ("1", "software"),
        ("2", "software"),
        ("139", "software"),
        ("134", "software"),
        ("137", None),
        ("143", None),
        ("0", None),
    ],
)
def test_exit_codes(code: str, klass: str | None) -> None:
    message = f"Pod: train.llama-pretrain-worker-3 exited with code {code}"
    line = f"20m   Normal   ExitedWithCode   pytorchjob/llama-pretrain   {message}"
    row = classified(extract_lines(parser, [line])).row(0, named=True)
    assert row["code"] == code and row["failure_class"] == klass
    assert row["severity"] == ("info" if code == "0" else "error")


@pytest.mark.parametrize(
    ("reason", "message", "klass"),
    [
        ("FailedMount", 'MountVolume.SetUp failed for volume "ckpt" : rpc error: code = DeadlineExceeded', "storage"),
        ("FailedAttachVolume", 'AttachVolume.Attach failed for volume "pvc-1" : timed out', "storage"),
        ("Preempted", "Preempted by pod 5e1c7a4f-8b2d-4e6a-9c0f-3d7b1e5a9c2f on node gpu-node-02", "preemption"),
        ("Rebooted", "Node gpu-node-02 has been rebooted, boot id: 7f3a9c1e-5b2d-4e8f", "maintenance"),
        ("NodeNotSchedulable", "Node gpu-node-02 status is now: NodeNotSchedulable", "maintenance"),
        ("TaintManagerEviction", "Cancelling deletion of Pod train/llama-pretrain-worker-2", None),
        ("Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503", None),
        ("Killing", "Stopping container pytorch", None),
        ("NodeHasDiskPressure", "Node gpu-node-02 status is now: NodeHasDiskPressure", None),
    ],
)
def test_event_reasons(reason: str, message: str, klass: str | None) -> None:
    line = f"3m1s   Warning   {reason}   pod/llama-pretrain-worker-2   {message}"
    row = classified(extract_lines(parser, [line])).row(0, named=True)
    assert row["state"] == reason and row["failure_class"] == klass


def test_preempted_event_names_the_node() -> None:
    line = "3m1s   Normal   Preempted   pod/llama-pretrain-worker-2   Preempted by pod 5e1c7a4f on node gpu-node-02"
    assert extract_lines(parser, [line]).row(0, named=True)["node"] == "gpu-node-02"


# --- sniffing and robustness ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        '{"level":"info","ts":1710410980.0042,"msg":"PyTorchJob llama-pretrain is running."}\n',
        '{"log":"I0901 00:25:09.311469 1 event.go:291] x\\n","stream":"stderr","time":"2021-09-01T00:25:09Z"}\n',
        '{"meta": {"plugin": {"type": "openapi/v0.0.37"}}, "jobs": []}\n',
        ':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "init_start"}\n',
        "model:\n  num_layers: 24\n  hidden_size: 2048\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
        "Name: trainer run 7\nloss 1.0\n",
        "I0314 09:38:02.418872       1 schedule_one.go:826] \"Unable to schedule pod; no fit; waiting\"\n",
    ],
)
def test_sniff_refuses_what_is_not_a_kubernetes_document(head: str) -> None:
    assert not parser.sniff(head)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=120), min_size=1, max_size=8))
def test_extract_never_raises_and_returns_raw_schema(lines: list[str]) -> None:
    out = extract_lines(parser, [line.replace("\n", " ").replace("\r", " ") for line in lines])
    assert out.schema == RAW_SCHEMA
    assert set(out["kind"]) <= set(KINDS) and set(out["severity"]) <= set(SEVERITIES)


_FIXTURE_LINES = sorted(
    {line for path in FIXTURES if path.suffix in (".txt", ".log", ".syslog") for line in path.read_text().splitlines()}
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_FIXTURE_LINES) | st.text(max_size=60), min_size=1, max_size=40))
def test_extract_never_raises_on_shuffled_kubernetes_lines(lines: list[str]) -> None:
    out = extract_lines(parser, [line.replace("\n", " ").replace("\r", " ") for line in lines])
    assert out.schema == RAW_SCHEMA
    assert set(out["kind"]) <= set(KINDS) and out["message"].null_count() == 0
    assert out["line"].is_between(1, len(lines)).all()


@given(st.text(max_size=400))
def test_sniff_never_raises(head: str) -> None:
    assert parser.sniff(head) in (True, False)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20)
    | st.sampled_from(["Event", "Pod", "Node", "PyTorchJob", "List", "2024-03-14T10:09:01Z", "OOMKilled"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(
        st.sampled_from(["kind", "items", "status", "state", "terminated", "conditions", "metadata", "reason", "type",
                         "containerStatuses", "lastState", "exitCode", "lastTimestamp", "involvedObject", "name", "x"]),
        inner,
        max_size=5,
    ),
    max_leaves=25,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_JSON)
def test_parse_objects_never_raises_on_odd_documents(value: object) -> None:
    out = parser.parse_objects(json.dumps(value)).collect()
    assert out.schema == RAW_SCHEMA
    assert set(out["kind"]) <= set(KINDS)


_DESCRIBE = sorted(K8S.glob("describe_*.txt"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_describe_output_pasted_from_any_line_gives_valid_rows(data: st.DataObject) -> None:
    """Pasted without its first lines ('Name:' among them), describe output still gives rows every
    required field of which is set: a node cordoned or a job started names '?' when its name was
    cut off (before, the message was null and the whole file failed validation)."""
    path = data.draw(st.sampled_from(_DESCRIBE))
    lines = path.read_text().splitlines()
    start = data.draw(st.integers(1, len(lines) - 1))
    out = extract_lines(parser, lines[start:])
    if out.height:
        validate_kinds(out, "kubernetes")


def test_a_node_fragment_without_its_name_reports_the_cordon() -> None:
    lines = (K8S / "describe_nodes.txt").read_text().splitlines()
    start = next(i for i, s in enumerate(lines) if s.startswith("Unschedulable:") and s.endswith("true")) - 1
    cordon = only(extract_lines(parser, lines[start:start + 12]), state="SchedulingDisabled")
    assert cordon["message"] == "Unschedulable: true (node ? cordoned)" and cordon["node"] is None


@pytest.mark.parametrize(
    ("lines", "node", "failure_class"),
    [
        # https://github.com/intel/pmem-csi/issues/261: one Events row pasted alone, one leading space.
        ([" Warning  Evicted    6m28s  kubelet, host-1    The node was low on resource: ephemeral-storage. "
          "Container .... was using 52Ki, which exceeds its request of 0."], "host-1", "storage"),
        # https://github.com/AliyunContainerService/gpushare-scheduler-extender/issues/59: the table behind a backtick.
        (["`Events:", "  Type     Reason            Age                From               Message",
          "  ----     ------            ----               ----               -------",
          "  Warning  FailedScheduling  6s (x5 over 3m1s)  default-scheduler  0/2 nodes are available: "
          "2 Insufficient aliyun.com/gpu-mem`"], None, "scheduling"),
        # https://github.com/microsoft/DLWorkspace/pull/1128: the row alone as inline code, its age <invalid>.
        (["`  Warning  Evicted    <invalid>  kubelet  The node had condition: [DiskPressure].`"], None, "storage"),
    ],
)
def test_an_events_row_without_its_describe_block_is_read(lines: list[str], node: str | None,
                                                         failure_class: str) -> None:
    row = only(classified(extract_lines(parser, lines)).filter(pl.col("failure_class").is_not_null()))
    assert (row["node"], row["failure_class"]) == (node, failure_class)


def test_a_line_that_only_looks_like_an_events_row_is_not_one() -> None:
    # no age column after the reason: prose, not a describe row
    assert extract_lines(parser, ["  Warning  Evicted pods keep piling up on this node"]).height == 0
    assert extract_lines(parser, ["`  Warning  Evicted pods keep piling up on this node`"]).height == 0


def test_describe_message_field_pasted_alone_names_the_eviction_resource() -> None:
    # https://github.com/kubernetes/kubernetes/issues/112927: describe's Message field, bold markers and all.
    line = ("Message:        The node was low on resource: memory. Container citadel was using 43536Ki, "
            "which exceeds its request of 0.**")
    row = only(classified(extract_lines(parser, [line])))
    assert (row["state"], row["failure_class"]) == ("Evicted", "oom_host")


REAL_K8S = DATA / "real_excerpts" / "kubernetes"


def test_node_rows_of_an_old_kubectl_without_roles_or_version_are_read() -> None:
    # https://github.com/kubernetes/kubernetes/issues/32522: NAME STATUS AGE rows, the header not pasted.
    ev = classified(parse_file(parser, REAL_K8S / "get_nodes_notready_no_header.log"))
    down = ev.filter(pl.col("failure_class").is_not_null())
    assert down["node"].to_list() == [f"gke-cluster-1-default-pool-777adf16-{n}" for n in ("erra", "w20k", "xsix", "y98j")]
    assert set(down["failure_class"]) == {"node_failure"}
    assert ev.filter(pl.col("state") == "Ready").height == 12
    assert down["message"][0] == "node gke-cluster-1-default-pool-777adf16-erra NotReady (age 4d)"


def test_a_three_column_line_needs_an_age_to_be_a_node_row() -> None:
    assert extract_lines(parser, ["worker NotReady since the upgrade"]).height == 0


def test_the_schedulers_sentence_quoted_alone_is_failed_scheduling() -> None:
    # https://github.com/kubeflow/kubeflow/issues/1262: a test harness printing why the pod is pending.
    row = only(classified(parse_file(parser, REAL_K8S / "pod_cannot_be_scheduled_insufficient_gpu.log")))
    assert (row["state"], row["failure_class"]) == ("FailedScheduling", "scheduling")
    assert row["message"] == "FailedScheduling: 0/5 nodes are available: 5 Insufficient nvidia.com/gpu."


def test_the_schedulers_sentence_in_an_events_row_is_read_once() -> None:
    lines = ["  Warning  FailedScheduling  2s (x57 over 15m)  default-scheduler  0/6 nodes are available: "
             "6 Insufficient nvidia.com/gpu."]
    assert only(classified(extract_lines(parser, lines)))["failure_class"] == "scheduling"


def test_an_eviction_sentence_quoted_as_inline_code_is_read() -> None:
    # https://github.com/kubeflow/kubeflow/issues/1261: the sentence between backticks.
    row = only(classified(parse_file(parser, REAL_K8S / "events_node_low_on_memory_backticks.log")))
    assert (row["state"], row["failure_class"], row["message"]) == (
        "Evicted", "oom_host", "Evicted: The node was low on resource: memory.")


def test_an_eviction_sentence_after_the_recorders_reason_is_read() -> None:
    # https://github.com/kubernetes/kubernetes/pull/63415: the tail of an event recorder line, as inline code.
    line = ("`reason: 'Evicted' The node was low on resource: memory. Container high-priority-memory-hog was using "
            "166088Ki, which exceeds its request of 10Mi.`")
    row = only(classified(extract_lines(parser, [line])))
    assert (row["state"], row["failure_class"]) == ("Evicted", "oom_host")


def test_kubelet_stopped_posting_quoted_alone_is_the_named_node_failing() -> None:
    # https://github.com/kubernetes/kubernetes/issues/21485: an e2e harness printing the node's Ready condition.
    line = ("Feb 17 13:58:47.304: INFO: Condition Ready of node e2e-gce-builder-2-3-minion-kb53 is false instead of "
            "true. Reason: NodeStatusUnknown, message: Kubelet stopped posting node status.")
    row = only(classified(extract_lines(parser, [line])))
    assert (row["kind"], row["state"], row["node"], row["failure_class"]) == (
        "node_state", "NodeStatusUnknown", "e2e-gce-builder-2-3-minion-kb53", "node_failure")
    bare = only(classified(extract_lines(parser, ["Kubelet stopped posting node status."])))
    assert (bare["node"], bare["failure_class"]) == (None, "node_failure")


def test_kubelet_stopped_posting_in_a_conditions_row_is_read_once() -> None:
    lines = ["  Ready            Unknown   Thu, 30 Nov 2017 10:53:56 +0000   Thu, 30 Nov 2017 10:55:21 +0000   "
             "NodeStatusUnknown     Kubelet stopped posting node status."]
    assert extract_lines(parser, lines).filter(pl.col("message").str.starts_with("NodeStatusUnknown: ")).height == 0


def test_a_lone_node_condition_row_is_read_as_a_node_fragment() -> None:
    # https://github.com/gesiscss/orc/issues/21: one row of `kubectl describe nodes`, without its table.
    line = ("  Ready                False   Sun, 06 Dec 2020 18:56:49 +0100   Sun, 06 Dec 2020 18:49:40 +0100   "
            "KubeletNotReady              PLEG is not healthy: pleg was last seen active 10m18.040734348s ago; "
            "threshold is 3m0s")
    row = only(classified(extract_lines(parser, [line])))
    assert (row["kind"], row["state"], row["failure_class"]) == ("node_state", "NotReady", "node_failure")
    # a pod's conditions print no times: those rows stay out
    assert extract_lines(parser, ["  Ready             False", "  ContainersReady   False"]).height == 0


def test_kernel_monitor_filesystem_errors_are_storage() -> None:
    # https://github.com/gardenlinux/gardenlinux/issues/263: node-problem-detector's Events rows.
    lines = ["  Warning  Ext4Warning  2m14s                  kernel-monitor  EXT4-fs warning (device nvme19n1): "
             "htree_dirblock_to_tree:997: inode #1048579: lblock 0: comm etcd: error -5 reading directory block",
             "  Warning  Ext4Error    2m13s                  kernel-monitor  EXT4-fs error (device nvme19n1): "
             "ext4_wait_block_bitmap:517: comm etcd: Cannot read block bitmap - block_group = 34, block_bitmap = 1048578"]
    assert classified(extract_lines(parser, lines))["failure_class"].to_list() == [None, "storage"]
