"""The run rule (which directories are runs) and the exposure of attempts (pure frames)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from tests.fleet.conftest import touch
from toranalyze.errors import InputError
from toranalyze.fleet.runs import find_runs
from toranalyze.fleet.stamps import content_hash
from toranalyze.fleet.tables import exposure_rows

T0 = datetime(2024, 6, 1, tzinfo=UTC)


def test_a_directory_with_a_log_file_is_one_run_with_everything_beneath(tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    touch(root, "truth.json", "a/slurmctld.log", "a/nodes/gpu-1/kern.log", "b/c/pod.log", "b/c/pods/x.yaml",
           "b/d/events.json", "b/README.md", ".hidden/x.log")
    runs = find_runs([str(root) + "/"], skip=[])
    assert [r.id for r in runs] == ["fleet/a", "fleet/b/c", "fleet/b/d"]
    assert runs[0].files == ("nodes/gpu-1/kern.log", "slurmctld.log")
    assert runs[1].files == ("pod.log", "pods/x.yaml")
    # the root itself is a run when it holds a log file; the store is never entered
    touch(root / "b" / "c", "store/jobs.log")
    assert [r.id for r in find_runs([str(root / "b" / "c")], skip=[str(root / "b" / "c" / "store")])] == ["c"]
    assert find_runs([str(root / "b" / "c")], skip=[str(root / "b" / "c" / "store")])[0].files == (
        "pod.log", "pods/x.yaml")


def test_run_ids_collide_loudly_and_hashes_follow_content(tmp_path: Path) -> None:
    touch(tmp_path, "x/fleet/r1/a.log", "y/fleet/r1/a.log")
    with pytest.raises(InputError, match="two runs"):
        find_runs([str(tmp_path / "x" / "fleet"), str(tmp_path / "y" / "fleet")])
    with pytest.raises(InputError, match="no such file"):
        find_runs([str(tmp_path / "x" / "fleet" / "r1" / "nothing")])
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(InputError, match="no log file"):
        find_runs([str(tmp_path / "empty")])
    (run,) = find_runs([str(tmp_path / "x" / "fleet")])
    h = content_hash(run, "salt")
    assert content_hash(run, "salt") == h and content_hash(run, "other") != h
    (tmp_path / "x" / "fleet" / "r1" / "a.log").write_text("changed\n")
    assert content_hash(run, "salt") != h


def test_exposure_is_running_time_up_to_the_first_error() -> None:
    h = timedelta(hours=1)
    attempts = pl.DataFrame({
        "job": ["j", "j", "k"],
        "attempt": pl.Series([0, 1, 0], dtype=pl.Int32),
        "t_start": [T0, T0 + 3 * h, T0],
        "t_end": [T0 + 2 * h, T0 + 5 * h, T0 + h],
        "gpus": pl.Series([16, 16, 8], dtype=pl.Int32),
        "nodes": pl.Series([2, 2, None], dtype=pl.Int32),
        "node_list": [["n1", "n2"], ["n1", "n3"], []],
    })
    incidents = pl.DataFrame({
        "job": ["j"], "attempt": pl.Series([0], dtype=pl.Int32),
        # failed at 1h30 (first error), detected and ended by the scheduler at 2h: 1.5 h exposure
        "t_first_error": [T0 + 1.5 * h], "t_last_progress": [T0 + 1.4 * h], "root_cause": ["software"],
    })
    job_gpus = pl.DataFrame({"job": ["j", "k"], "job_gpus": pl.Series([16, 8], dtype=pl.Int32)})
    exp = exposure_rows(attempts, incidents, job_gpus).sort("job", "attempt", "node")
    assert exp.select("job", "attempt", "node", "hours", "gpus", "nodes").rows() == [
        ("j", 0, "n1", 1.5, 8, 1), ("j", 0, "n2", 1.5, 8, 1),
        ("j", 1, "n1", 2.0, 8, 1), ("j", 1, "n3", 2.0, 8, 1),
        ("k", 0, None, 1.0, 8, None),
    ]
    assert exp["gpu_hours"].sum() == pytest.approx(2 * 1.5 * 8 + 2 * 2.0 * 8 + 8.0)
    assert exp.filter(pl.col("job") == "j")["node_hours"].sum() == pytest.approx(7.0)
    # a hang stopped running at its last progress: its detector's timeout is not exposure
    hung = exposure_rows(attempts, incidents.with_columns(pl.lit("hang").alias("root_cause")), job_gpus)
    assert hung.filter((pl.col("job") == "j") & (pl.col("attempt") == 0))["hours"].to_list() == [
        pytest.approx(1.4), pytest.approx(1.4)]


def test_hosts_the_logs_do_not_name_keep_their_share_of_the_exposure() -> None:
    """An attempt on four hosts whose logs name one (an allocation after a requeue): the named host
    runs a quarter of the GPUs, the three others one node-less row; the total is the attempt's."""
    h = timedelta(hours=1)
    attempts = pl.DataFrame({
        "job": ["j"], "attempt": pl.Series([0], dtype=pl.Int32), "t_start": [T0], "t_end": [T0 + 2 * h],
        "gpus": pl.Series([32], dtype=pl.Int32), "nodes": pl.Series([4], dtype=pl.Int32), "node_list": [["n1"]],
    })
    incidents = pl.DataFrame(schema={"job": pl.String, "attempt": pl.Int32, "t_first_error": pl.Datetime("us", "UTC"),
                                     "t_last_progress": pl.Datetime("us", "UTC"), "root_cause": pl.String})
    job_gpus = pl.DataFrame({"job": ["j"], "job_gpus": pl.Series([32], dtype=pl.Int32)})
    exp = exposure_rows(attempts, incidents, job_gpus).sort("node", nulls_last=True)
    assert exp.select("node", "gpus", "nodes").rows() == [("n1", 8, 1), (None, 24, 3)]
    assert exp["gpu_hours"].sum() == pytest.approx(64.0) and exp["node_hours"].sum() == pytest.approx(8.0)
