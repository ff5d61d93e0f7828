"""Attempts whose first step falls in the second their start was stamped (no start-up delay
between the scheduler's start, the trainer's init lines and the first logged step, with the
simulator's seconds of clock skew between hosts): each restart is one attempt, never a phantom
zero-downtime interruption."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from toranalyze.cli import cli

CONFIG = """
[run]
name = "fast"
start = "2024-05-01T00:00:00Z"
nodes = 2
gpus_per_node = 8
spare_nodes = 2
duration = "4h"
step_time = 2.0
log_interval = 1
ckpt_interval_steps = 300
ckpt_save = 10.0
fixed_repair = "4m"
nccl_chatter = 0

[failures.software]
rate = 1.5
per = "job_hour"
shape = 1.0
"""


@pytest.mark.parametrize("seed", [1, 2])
def test_each_fast_restart_is_one_attempt(tmp_path: Path, seed: int) -> None:
    (tmp_path / "fast.toml").write_text(CONFIG)
    runner = CliRunner()
    sim = runner.invoke(cli, ["simulate", "--config", str(tmp_path / "fast.toml"), "--seed", str(seed),
                              "--out", str(tmp_path / "run")])
    assert sim.exit_code == 0, sim.output
    res = runner.invoke(cli, ["analyze", str(tmp_path / "run"), "-o", str(tmp_path / "out"), "-q", "--no-report"])
    assert res.exit_code == 0, res.output
    truth = json.loads((tmp_path / "run" / "truth.json").read_text())["jobs"][0]
    assert len(truth["incidents"]) >= 3
    attempts = pl.read_parquet(tmp_path / "out" / "attempts.parquet")
    incidents = pl.read_parquet(tmp_path / "out" / "incidents.parquet")
    assert attempts.height == len(truth["attempts"])
    assert incidents.height == len(truth["incidents"])
    assert incidents.filter(pl.col("root_cause") == "unknown").height == 0
