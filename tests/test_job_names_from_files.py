"""A file no record of which names a job takes the run its name starts with (a pod's log named after
its pod, the pod after its job), before the directory's run with the most records
(reconstruct/jobs.py ``_with_named_files``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from toranalyze.reconstruct.jobs import assign_jobs, with_time
from toranalyze.schema import EVENT_SCHEMA, conform_to

T0 = datetime(2024, 6, 1, tzinfo=UTC)


def _rows(file: str, job_id: str | None, kind: str, n: int) -> list[dict]:
    return [{"file": file, "line": i + 1, "job_id": job_id, "kind": kind, "severity": "info", "source": "kubernetes"
             if job_id else "trainer", "ts": T0 + timedelta(minutes=i), "message": f"{kind} {i}",
             "step": i if kind == "step" else None} for i in range(n)]


def test_a_pod_log_takes_the_run_it_is_named_after() -> None:
    rows = (_rows("run/events.json", "data-prep", "info", 20)  # another team's CronJob: more records
            + _rows("run/events.json", "wild-007", "job_start", 2)
            + _rows("run/logs/wild-007-master-0.log", None, "step", 30))
    events = conform_to(pl.DataFrame(rows), EVENT_SCHEMA).collect()
    ev, jobs = assign_jobs(with_time(events))
    trained = ev.filter(pl.col("kind") == "step")["job"].unique().to_list()
    assert trained == ["run::wild-007"]
    assert set(jobs["job"]) == {"run::wild-007", "run::data-prep"}
