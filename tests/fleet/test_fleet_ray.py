"""``toranalyze fleet --engine ray``: each run analysed as a Ray task gives the local engine's store."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from toranalyze.cli import cli
from toranalyze.fleet.build import build
from toranalyze.fleet.pipeline import OutputOptions, RunOptions
from toranalyze.fleet.store import Store
from toranalyze.fleet.tables import TABLES
from toranalyze.ingest.pipeline import Workers

HAS_RAY = importlib.util.find_spec("ray") is not None


@pytest.mark.slow  # a Ray start-up and two builds of a four-run fleet
@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install 'toranalyze[ray]')")
def test_ray_two_workers_give_the_local_store(tmp_path: Path) -> None:
    import ray

    fleet = tmp_path / "fleet"
    res = CliRunner().invoke(cli, ["simulate", "--seed", "7", "--out", str(fleet), "--preset", "fleet",
                                   "--jobs", "4", "--duration", "40m", "--nodes", "1"])
    assert res.exit_code == 0, res.output
    no_report = RunOptions(output=OutputOptions(report=False))
    local = build([str(fleet)], tmp_path / "local", no_report, Workers(1))
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # a local instance, 2 workers
        dist = build([str(fleet)], tmp_path / "ray", no_report, Workers(2, "ray"))
    finally:
        ray.shutdown()
    assert dist.analyzed == local.analyzed and len(local.analyzed) == 4
    local_store, ray_store = Store(tmp_path / "local"), Store(tmp_path / "ray")
    for t in TABLES:
        want = local_store.read(t)
        assert want.height > 0 or t == "incidents"  # 40-minute runs seldom fail
        assert_frame_equal(ray_store.read(t), want, check_exact=True)
    # The runs (content hashes, status, file stamps) are the same too.
    assert_frame_equal(ray_store.run_frame().drop("generation").sort("run"),
                       local_store.run_frame().drop("generation").sort("run"), check_exact=True)


@pytest.mark.slow  # a two-node Ray cluster and two builds of a four-run fleet
@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install 'toranalyze[ray]')")
def test_batches_on_a_two_node_cluster_give_the_local_store(tmp_path: Path) -> None:
    """The set-up docs/fleet.md describes for a cluster, on one machine: a head node and a second
    node of one CPU each, and ``fleet --engine ray --ray-address`` from another process."""
    import subprocess
    import sys

    from ray.cluster_utils import Cluster

    fleet = tmp_path / "fleet"
    res = CliRunner().invoke(cli, ["simulate", "--seed", "8", "--out", str(fleet), "--preset", "fleet",
                                   "--jobs", "4", "--duration", "40m", "--nodes", "1"])
    assert res.exit_code == 0, res.output
    local = tmp_path / "local"
    build([str(fleet)], local, RunOptions(output=OutputOptions(report=False)), Workers(1))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        out = subprocess.run(
            [sys.executable, "-m", "toranalyze", "fleet", str(fleet), "-o", str(tmp_path / "ray"), "--no-report",
             "-q", "--engine", "ray", "--ray-address", cluster.address, "-j", "2"],
            capture_output=True, text=True, timeout=600, check=False)
        assert out.returncode == 0, out.stderr[-3000:]
    finally:
        cluster.shutdown()
    for t in TABLES:
        assert_frame_equal(Store(tmp_path / "ray").read(t), Store(local).read(t), check_exact=True)
