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
