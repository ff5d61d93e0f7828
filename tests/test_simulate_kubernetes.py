"""The simulator's Kubernetes flavour, kubectl-style rendering, and bounded-memory emission."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from toranalyze.ingest.pipeline import ingest
from toranalyze.model import config_from_dict, load_preset
from toranalyze.simulate.command import job_configs, run_simulation
from toranalyze.simulate.kyaml import scalar, to_json, to_yaml
from toranalyze.simulate.timeline import simulate_timeline
from toranalyze.simulate.truth import job_truth
from toranalyze.simulate.writer import RunWriter

# Every simulated class once, on a 2-node x 2-GPU job with short steps: a small, fast run.
EVERY_CLASS = ("gpu_hardware", "network", "oom_host", "software", "preemption", "hang", "numerics", "oom_gpu",
               "node_failure", "maintenance", "user_cancel", "host_hardware", "storage", "gpu_memory",
               "collective_timeout", "gpu_interconnect")
RUN = {
    "name": "k8s-small", "flavor": "kubernetes", "nodes": 2, "gpus_per_node": 2, "spare_nodes": 6,
    "duration": "100m", "step_time": 2.0, "ckpt_interval_steps": 50, "ckpt_save": 5.0,
    "startup": [10.0, 20.0], "ckpt_load": [5.0, 10.0], "queue_wait": [20.0, 60.0], "watchdog_timeout": "2m",
    "nan_run_on": ["1m", "2m"], "nccl_chatter": 6, "slow_rate_per_hour": 0.0,
}
DATA = {
    "run": RUN,
    "detection": {"hang": ["2m", "4m"]},
    "script": [{"at": f"{5 * (i + 1)}m", "class": c} for i, c in enumerate(EVERY_CLASS)],
}
WALLTIME = {"run": {**RUN, "name": "k8s-deadline", "duration": "50m", "walltime": "20m"}}


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def k8s_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("k8s")
    run_simulation(out, 5, DATA, None)
    return out


@pytest.fixture(scope="module")
def k8s_ingested(k8s_run: Path):
    return ingest([str(k8s_run)])


def test_same_seed_same_bytes(k8s_run: Path, tmp_path: Path) -> None:
    run_simulation(tmp_path / "again", 5, DATA, None)
    assert _files(tmp_path / "again") == _files(k8s_run)
    run_simulation(tmp_path / "other", 6, DATA, None)
    assert _files(tmp_path / "other") != _files(k8s_run)


def test_layout_and_truth(k8s_run: Path) -> None:
    names = set(_files(k8s_run))
    assert {"events.json", "pytorchjob.yaml", "truth.json", "logs/k8s-small-master-0.log",
            "logs/k8s-small-worker-0.log"} <= names
    truth = json.loads((k8s_run / "truth.json").read_text())["jobs"][0]
    assert truth["flavor"] == "kubernetes" and truth["job_ids"] == ["k8s-small"]
    assert {i["root_cause"] for i in truth["incidents"]} == set(EVERY_CLASS)
    ledger = truth["ledger_us"]
    assert sum(v for k, v in ledger.items() if k != "t_obs") == ledger["t_obs"]
    # one pod snapshot per pod and attempt
    assert sum(n.startswith("pods/") for n in names) == 2 * len(truth["attempts"])
    # only the master's log holds trainer progress
    assert "iteration" in (k8s_run / "logs/k8s-small-master-0.log").read_text()
    assert "iteration " not in (k8s_run / "logs/k8s-small-worker-0.log").read_text()


def test_documents_are_what_kubectl_prints(k8s_run: Path) -> None:
    events = json.loads((k8s_run / "events.json").read_text())
    assert events["kind"] == "List" and events["items"]
    order = [(e["metadata"]["namespace"], e["metadata"]["name"]) for e in events["items"]]
    assert order == sorted(order)  # the API lists by namespace, then name
    for e in events["items"]:
        assert (e["eventTime"] is None) != (e["firstTimestamp"] is None)
        assert e["metadata"]["name"].startswith(e["involvedObject"]["name"] + ".")
    job = yaml.safe_load((k8s_run / "pytorchjob.yaml").read_text())
    assert job["kind"] == "PyTorchJob" and job["status"]["conditions"][-1]["type"] == "Succeeded"
    for p in sorted((k8s_run / "pods").glob("*.yaml")):
        pod = yaml.safe_load(p.read_text())
        assert pod["kind"] == "Pod" and pod["spec"]["nodeName"].startswith("gpu-")
        (cs,) = pod["status"]["containerStatuses"]
        assert "terminated" in cs["lastState"] or "terminated" in cs["state"] or "running" in cs["state"]


def test_oomkilled_reason_and_in_place_restarts(k8s_run: Path) -> None:
    pods = [yaml.safe_load(p.read_text()) for p in sorted((k8s_run / "pods").glob("*.yaml"))]
    terms = [cs["lastState"].get("terminated") or cs["state"].get("terminated")
             for pod in pods for cs in pod["status"]["containerStatuses"]]
    oom = [t for t in terms if t and t["reason"] == "OOMKilled"]
    assert len(oom) == 1 and oom[0]["exitCode"] in (0, 137)
    assert max(cs["restartCount"] for pod in pods for cs in pod["status"]["containerStatuses"]) >= 2


def test_pipeline_reads_every_class(k8s_run: Path, k8s_ingested) -> None:
    res = k8s_ingested
    reports = {Path(r.path).relative_to(k8s_run).as_posix(): r for r in res.files}
    for name, r in reports.items():
        if name.endswith((".json", ".yaml")):
            assert r.parser == "kubernetes", name
            assert r.coverage == 1.0, name
    ev = res.events
    states = set(ev["state"].drop_nulls().to_list())
    assert {"OOMKilled", "Preempted", "NodeNotReady", "TaintManagerEviction", "NodeNotSchedulable",
            "FailedScheduling", "BackOff", "Killing", "ExitedWithCode", "PyTorchJobSucceeded",
            "EvictionByEvictionAPI", "PreemptionByScheduler"} <= states
    classes = set(ev["failure_class"].drop_nulls().to_list())
    assert {"gpu_hardware", "gpu_memory", "gpu_interconnect", "network", "host_hardware", "node_failure",
            "storage", "oom_gpu", "oom_host", "software", "collective_timeout", "preemption",
            "maintenance", "scheduling"} <= classes
    assert ev.filter(pl.col("kind") == "step").height > 1000


def test_deadline_kills_every_pod(tmp_path: Path) -> None:
    run_simulation(tmp_path, 2, WALLTIME, None)
    truth = json.loads((tmp_path / "truth.json").read_text())["jobs"][0]
    assert [i["root_cause"] for i in truth["incidents"]] == ["walltime", "walltime"]
    ev = ingest([str(tmp_path)]).events
    dead = ev.filter(pl.col("state") == "DeadlineExceeded")
    assert dead.height >= 4 and set(dead["failure_class"].drop_nulls().to_list()) == {"walltime"}
    restarting = ev.filter(pl.col("state") == "PyTorchJobRestarting")
    assert restarting.height >= 1
    pod = yaml.safe_load((tmp_path / "pods/k8s-deadline-master-0.attempt-0.yaml").read_text())
    started = pod["status"]["startTime"]
    limit = pod["spec"]["activeDeadlineSeconds"]
    killed = next(e for e in json.loads((tmp_path / "events.json").read_text())["items"]
                  if e["reason"] == "DeadlineExceeded" and e["involvedObject"]["name"] == "k8s-deadline-master-0")
    import datetime as dt

    t = lambda s: dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()  # noqa: E731
    assert abs(t(started) + limit - t(killed["firstTimestamp"])) <= 2


def test_same_history_in_both_flavours() -> None:
    data = {**DATA, "run": {**RUN, "flavor": "slurm"}}
    a = simulate_timeline(config_from_dict(data), rng=np.random.default_rng([5, 0]))
    b = simulate_timeline(config_from_dict(DATA), rng=np.random.default_rng([5, 0]))
    ta, tb = job_truth(a), job_truth(b)
    for t in (ta, tb):
        t.pop("flavor"), t.pop("job_ids")
        for x in t["attempts"] + t["incidents"]:
            x.pop("job_id")
    assert ta == tb


def test_fleet_mixes_flavours_without_changing_slurm_jobs(tmp_path: Path) -> None:
    data = load_preset("fleet")
    small = {**data["fleet"], "jobs": 6, "duration": ["20m", "30m"], "nodes": [1, 2]}
    mixed = job_configs({**data, "fleet": small}, 4)
    plain = job_configs({**data, "fleet": {**small, "flavors": ["slurm"]}}, 4)
    assert {c.flavor for c in mixed} == {"slurm", "kubernetes"}
    for m, p in zip(mixed, plain, strict=True):
        assert (m.nodes, m.duration_s, m.start) == (p.nodes, p.duration_s, p.start)
    run_simulation(tmp_path / "mixed", 4, {**data, "fleet": small}, "fleet")
    run_simulation(tmp_path / "plain", 4, {**data, "fleet": {**small, "flavors": ["slurm"]}}, "fleet")
    for c in mixed:
        if c.flavor == "slurm":
            assert _files(tmp_path / "mixed" / c.name) == _files(tmp_path / "plain" / c.name)
        else:
            assert (tmp_path / "mixed" / c.name / "events.json").exists()


# ------------------------------------------------------------------------------------ bounded memory
def test_streamed_emission_equals_kept_steps(tmp_path: Path) -> None:
    """The writer replays steps chunk by chunk; the bytes equal those from kept arrays."""
    data = load_preset("small")
    data = {**data, "run": {**data["run"], "duration": "90m", "nodes": 2}}
    run_simulation(tmp_path / "streamed", 3, data, "small")
    cfg = config_from_dict(data)
    tl = simulate_timeline(cfg, rng=np.random.default_rng([3, 0]))  # keeps every step
    assert tl.steps_kept
    sizes = RunWriter(tl, 3, 0).write_slurm(tmp_path / "kept")
    streamed = _files(tmp_path / "streamed")
    for name in sizes:
        assert streamed[name] == (tmp_path / "kept" / name).read_bytes(), name


def test_running_sums_equal_the_arrays() -> None:
    cfg = config_from_dict(load_preset("small"))
    full = simulate_timeline(cfg, rng=np.random.default_rng([9, 0]))
    lean = simulate_timeline(cfg, rng=np.random.default_rng([9, 0]), keep_steps=False,
                             replay=lambda: np.random.default_rng([9, 0]))
    assert job_truth(full) == job_truth(lean)
    assert all(len(a.steps) == 0 for a in lean.attempts)
    src = lean.steps()
    for a in full.attempts:
        chunks = list(src.attempt(a.index))
        got = np.concatenate([c[0] for c in chunks]) if chunks else np.zeros(0, np.int64)
        assert np.array_equal(got, a.steps)
        assert all(len(c[0]) <= cfg.ckpt_interval_steps for c in chunks)


# ------------------------------------------------------------------------------------ kubectl text
def test_yaml_quoting_and_folding_like_go_yaml() -> None:
    assert scalar("True", 8, 4) == ['"True"']
    assert scalar("8", 8, 4) == ['"8"']
    assert scalar("2024-03-04T08:00:00Z", 8, 4) == ['"2024-03-04T08:00:00Z"']
    assert scalar("1800Gi", 8, 4) == ["1800Gi"]
    assert scalar("containers with unready status: [pytorch]", 13, 6) == ["'containers with unready status: [pytorch]'"]
    assert scalar("", 8, 4) == ['""']
    long = "0/12 nodes are available: 4 Insufficient nvidia.com/gpu, 8 node(s) didn't match Pod's node affinity."
    lines = scalar(long, 13, 6)
    assert len(lines) == 2 and lines[1].startswith("      ") and len(lines[0]) > 60
    obj = {"b": {"z": 1, "a": [{"x": long, "y": "it's"}]}, "a10": 1, "a9": "on", "A": []}
    text = to_yaml(obj)
    assert text.splitlines()[:2] == ["A: []", "a9: \"on\""]  # natural order: a9 before a10
    assert yaml.safe_load(text) == obj
    assert to_json({"m": "<b>&"}) == '{\n    "m": "\\u003cb\\u003e\\u0026"\n}\n'
