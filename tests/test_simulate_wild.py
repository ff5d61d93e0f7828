"""The ``fleet-wild`` preset: wrappers, kernel-log formats, size sources, pods per node, peer errors."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from toranalyze.model import config_from_dict, load_preset
from toranalyze.simulate.command import Overrides, job_configs, run_simulation
from toranalyze.simulate.context import RunContext
from toranalyze.simulate.evidence import attempt_evidence
from toranalyze.simulate.timeline import simulate_timeline
from toranalyze.simulate.wild import KERNEL_FILE, WRAPPERS, WildJob, WildSpec

SMALL = Overrides(duration=1800.0, jobs=6)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for name, data in _files(root).items():
        h.update(name.encode())
        h.update(data)
    return h.hexdigest()


@pytest.fixture(scope="module")
def wild_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wild")
    run_simulation(out, 11, load_preset("fleet-wild"), "fleet-wild", SMALL)
    return out


def test_same_seed_same_bytes(wild_fleet: Path, tmp_path: Path) -> None:
    run_simulation(tmp_path, 11, load_preset("fleet-wild"), "fleet-wild", SMALL)
    assert _files(tmp_path) == _files(wild_fleet)


def test_another_seed_other_draws(tmp_path: Path) -> None:
    spec = WildSpec.from_data(load_preset("fleet-wild"))
    assert spec is not None
    a = [spec.draw(1, k, "kubernetes", 8) for k in range(12)]
    b = [spec.draw(2, k, "kubernetes", 8) for k in range(12)]
    assert a == [spec.draw(1, k, "kubernetes", 8) for k in range(12)]
    assert a != b


# what each wrapper leaves on every line it wraps (the legacy loggers wrap the trainer's lines only)
WRAP_RE = {
    "iso_host": re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z gpu-\d{3} "),
    "host_pipe": re.compile(r"^gpu-\d{3} \| "),
    "cri": re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z std(out|err) F "),
    "docker_json": re.compile(r'^\{"log":".*\\n","stream":"std(out|err)","time":"[^"]+Z"\}$'),
    "fluent_bit": re.compile(r'^\{"@timestamp":"[^"]+Z",.*"kubernetes":\{"pod_name":"[^"]+",.*"host":"gpu-\d{3}"\}\}$'),
}
TRAINER_RE = {
    "pylogging": re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - INFO - \[\d{4}-.*iteration"),
    "glog": re.compile(r"^I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ training\.py:\d+\] \[\d{4}-.*iteration"),
    "none": re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] iteration "),
}


def _console(job_dir: Path) -> list[Path]:
    return sorted(job_dir.glob("slurm-*.out")) + sorted((job_dir / "logs").glob("*.log"))


def test_every_wrapper_kind_across_seeds(tmp_path: Path) -> None:
    data = load_preset("fleet-wild")
    spec = WildSpec.from_data(data)
    assert spec is not None
    seen = set()
    for seed in (1, 2, 3):
        for k, cfg in enumerate(job_configs(data, seed, Overrides(jobs=24))):
            seen.add(spec.draw(seed, k, cfg.flavor, cfg.gpus_per_node).wrapper)
    assert seen == set(WRAPPERS)


def test_written_lines_carry_the_drawn_wrapper(wild_fleet: Path) -> None:
    truth = json.loads((wild_fleet / "truth.json").read_text())
    for job in truth["jobs"]:
        w = job["wild"]["wrapper"]
        files = _console(wild_fleet / job["job"])
        assert files
        text = [s for f in files for s in f.read_text().splitlines()]
        if w in WRAP_RE:
            assert all(WRAP_RE[w].match(s) for s in text), (job["job"], w)
        else:
            assert any(TRAINER_RE[w].match(s) for s in text), (job["job"], w)
        kern = KERNEL_FILE[job["wild"]["kernel_log"]]
        assert all((d / kern).is_file() for d in (wild_fleet / job["job"] / "nodes").iterdir())


def test_wrapper_and_kernel_formats_render() -> None:
    from toranalyze.simulate.wild import Wrapper, kernel_line

    t = 1717200001_123456  # 2024-06-01T00:00:01.123456Z
    assert Wrapper("cri", "gpu-001", 0).line(t, "x", "stderr").startswith("2024-06-01T00:00:01.12")
    assert Wrapper("pylogging", "gpu-001", 0).line(t, "x", "stdout").startswith("2024-06-01 00:00:01,12")
    assert Wrapper("pylogging", "gpu-001", 0).line(t, "x", "stderr") == "x"
    doc = json.loads(Wrapper("docker_json", "gpu-001", 0).line(t, "a \"b\"", "stderr"))
    assert doc["log"] == 'a "b"\n' and doc["stream"] == "stderr"
    assert kernel_line("journal", "gpu-001", t, 5.0, "m") == "2024-06-01T00:00:01+00:00 gpu-001 kernel: m"
    assert kernel_line("dmesg", "gpu-001", t, 5.0, "m") == "[Sat Jun  1 00:00:01 2024] m"
    assert kernel_line("syslog", "gpu-001", t, 5.0, "m") == "Jun  1 00:00:01 gpu-001 kernel: [    5.000000] m"


PEER = re.compile(r"NCCL WARN (NET/IB : Got completion|socketProgressOpt)|ncclRemoteError|Watchdog caught")


@pytest.mark.parametrize("cls", ["software", "oom_gpu", "oom_host", "gpu_hardware"])
def test_peer_errors_follow_the_death(cls: str) -> None:
    data = load_preset("fleet-wild")
    data = {**data, "run": {**data["run"], "nodes": 4, "duration": "2h"},
            "failures": {}, "script": [{"at": "30m", "class": cls}]}
    data.pop("fleet")
    cfg = config_from_dict(data)
    for seed in range(4):
        tl = simulate_timeline(cfg, rng=np.random.default_rng([seed, 0]))
        inc = tl.incidents[0]
        a = tl.attempts[inc.attempt]
        ctx = RunContext(tl, seed, 0, wild=WildJob(peer_errors=True, active=True))
        ev = attempt_evidence(ctx, a, inc, False)
        dead = a.nodes.index(inc.node)
        peers = [(t, node) for t, s, node in ev.out if PEER.search(s)]
        assert peers, (cls, seed)
        assert all(node != dead for _, node in peers)
        assert min(t for t, _ in peers) > inc.t_fail
        assert max(t for t, _ in peers) < inc.t_detected
        if cls in ("software", "oom_gpu"):
            death = min(t for t, s, node in ev.out if node == dead and "Traceback" in s)
            assert min(t for t, _ in peers) > death


def test_truth_records_whether_the_size_is_stated(wild_fleet: Path) -> None:
    truth = json.loads((wild_fleet / "truth.json").read_text())
    for job in truth["jobs"]:
        src = job["wild"]["size_source"]
        assert job["size_stated"] is (job["flavor"] == "slurm" or src != "none")
        d = wild_fleet / job["job"]
        if job["flavor"] != "kubernetes":
            continue
        assert (d / "pytorchjob.yaml").exists() is (src == "spec")
        assert (d / "pods").exists() is (src == "spec")
        text = "\n".join(f.read_text() for f in _console(d))
        world = job["n_gpus"]
        stated = {
            "megatron": f"using world size: {world},",
            "nccl": f"nranks {world} ",
            "torchrun": f"global_world_sizes=[{world}",
            "env": f"WORLD_SIZE={world}",
        }
        for kind, needle in stated.items():
            assert (needle in text) is (kind == src), (job["job"], kind, src)
        assert len(list((d / "logs").glob("*.log"))) == job["n_nodes"] * job["wild"]["pods_per_node"]


def test_pods_share_nodes_in_some_runs() -> None:
    data = load_preset("fleet-wild")
    spec = WildSpec.from_data(data)
    assert spec is not None
    ppn = [spec.draw(s, k, "kubernetes", 8).pods_per_node for s in range(3) for k in range(12)]
    assert 1 in ppn and any(p > 1 for p in ppn)
    assert all(spec.draw(s, 0, "slurm", 8).pods_per_node == 1 for s in range(6))


# sha256 over the names and bytes of a tiny simulation of existing presets (seed 31031, two nodes,
# 30 minutes): the [wild] machinery must leave them as they were
DIGESTS = {
    ("small", "slurm"): "8d8cfb84e7302d4c8627a8836a5d3b93bf79a803c7846a10a66a3522bddd67b5",
    ("small", "kubernetes"): "7990f77230b1e106d7a68f45de45adb6a174c6a0a71ece2c29af08f15bf20334",
    ("fleet", "slurm"): "8929cfa2ee85c2c4dc1f08753529eedcab421ed10e7bddb9a9438a706b795e28",
    ("fleet", "kubernetes"): "5ebf86af721a0e602c2b41059da913d25f9db011f36d0b74286cd6938da7ebaf",
}


@pytest.mark.parametrize(("preset", "flavor"), sorted(DIGESTS))
def test_existing_presets_unchanged(preset: str, flavor: str, tmp_path: Path) -> None:
    over = Overrides(duration=1800.0, nodes=2, flavor=flavor, jobs=2 if preset == "fleet" else None)
    run_simulation(tmp_path, 31031, load_preset(preset), preset, over)
    assert _digest(tmp_path) == DIGESTS[(preset, flavor)]
