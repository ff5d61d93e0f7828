"""One analyzed run -> the four fleet tables -> rates.json (what `analyze` writes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from toranalyze.fleet.rates import build_rates, check_rates
from toranalyze.fleet.single_run import run_frames
from toranalyze.reconstruct.analysis import ATTEMPTS_SCHEMA, INCIDENTS_SCHEMA, TOR_SCHEMA
from toranalyze.simulate.fleet_truth import conform

T0 = datetime(2024, 3, 4, 8, tzinfo=UTC)
H = timedelta(hours=1)


def test_single_run_frames_and_rates() -> None:
    attempts = conform([{"job": "runs/a::1", "attempt": 0, "t_start": T0, "t_end": T0 + 2 * H},
                        {"job": "runs/a::1", "attempt": 1, "t_start": T0 + 3 * H, "t_end": T0 + 6 * H}], ATTEMPTS_SCHEMA)
    incidents = conform([{"job": "runs/a::1", "incident": 0, "attempt": 0, "root_cause": "gpu_hardware",
                          "planned": False, "nodes": ["n2"], "t_last_progress": T0 + 2 * H,
                          "t_detected": T0 + 2.2 * H, "t_resumed": T0 + 3.3 * H}], INCIDENTS_SCHEMA)
    tor = conform([{"job": "runs/a::1", "path": "runs/a", "t_obs_s": 6 * 3600.0, "tor": 0.7}], TOR_SCHEMA)
    ev = [{"file": "runs/a/node.log", "ts": T0 + k * 0.1 * H, "node": f"n{1 + k % 2}", "rank": k % 16}
          for k in range(20)]  # attempt 0 on n1, n2 (16 ranks)
    ev += [{"file": "runs/a/node.log", "ts": T0 + 3 * H + k * 0.1 * H, "node": f"n{2 + k % 2}", "rank": k % 16}
           for k in range(20)]  # attempt 1 on n2, n3
    ev += [{"file": "runs/b/other.log", "ts": T0 + H, "node": "n9", "rank": 0}]  # another run's file
    events = pl.DataFrame(ev, schema={"file": pl.String, "ts": pl.Datetime("us", "UTC"), "node": pl.String,
                                      "rank": pl.Int32})
    f = run_frames(attempts, incidents, tor, events, run="r")
    assert f["attempts"]["node_list"].to_list() == [["n1", "n2"], ["n2", "n3"]]
    assert f["attempts"]["gpus"].to_list() == [16, 16]
    ex = f["exposure"]
    assert ex["node_hours"].sum() == 10.0 and ex["gpu_hours"].sum() == 80.0
    doc = check_rates(build_rates(f["jobs"], f["attempts"], f["incidents"], f["exposure"]))
    assert doc["unexpected"]["failures"] == 1 and doc["exposure"]["job_hours"] == 5.0
    assert doc["downtime"]["detection"]["n"] == 1
