"""Clock offsets between files and nodes: a planted skew is found, and shown in the report."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from toranalyze.reconstruct.skew import clock_offsets, clock_skew, skewed
from toranalyze.report.job import JobReportInput, render_job_report

from .conftest import Run

PLANT_S = 40.0


def _ranks_logging_steps(skew_s: dict[str, float], steps: int = 300) -> pl.DataFrame:
    """Four nodes' ranks logging the same steps into one output (ms of jitter), and the same
    step numbers recomputed ten minutes later by the next attempt into another output."""
    rng = np.random.default_rng(7)
    t0 = datetime(2024, 6, 1, tzinfo=UTC)
    rows = []
    for node in ("n1", "n2", "n3", "n4"):
        jitter = rng.normal(0, 0.003, steps)
        for k in range(steps):
            stamp = t0 + timedelta(seconds=2 * k + skew_s.get(node, 0.0) + jitter[k])
            rows.append((stamp, node, k, "a.out"))
            rows.append((stamp + timedelta(minutes=10), node, k, "b.out"))
    return pl.DataFrame(rows, schema={"ts": pl.Datetime("us", "UTC"), "node": pl.String, "step": pl.Int64,
                                      "file": pl.String}, orient="row").with_columns(
        pl.lit(False).alias("ts_inferred"), pl.lit("step").alias("kind"), pl.lit("trainer").alias("source"),
        pl.lit(None, pl.String).alias("job_id"), pl.lit(None, pl.Int32).alias("attempt"))


def test_one_skewed_node_among_four_is_found_alone() -> None:
    off = clock_offsets(_ranks_logging_steps({"n3": 7.5}), "node")
    got = dict(zip(off["unit"], off["offset_s"], strict=True))
    assert got["n3"] == pytest.approx(7.5, abs=0.02)
    assert all(abs(got[n]) < 0.02 for n in ("n1", "n2", "n4"))
    assert skewed(off)["unit"].to_list() == ["n3"]
    # a step is one moment within one output: the rerun's steps are other anchors, not the same
    assert off.filter(pl.col("unit") == "n3")["anchors"][0] == 600


def test_clocks_that_agree_are_not_flagged() -> None:
    off = clock_offsets(_ranks_logging_steps({}), "node")
    assert off.height == 4 and skewed(off).height == 0


def _shift_file(events: pl.DataFrame, suffix: str, seconds: float) -> pl.DataFrame:
    return events.with_columns(pl.when(pl.col("file").str.ends_with(suffix))
                               .then(pl.col("ts") + pl.duration(microseconds=int(seconds * 1e6)))
                               .otherwise("ts").alias("ts"))


def test_a_planted_skew_on_the_controller_log_is_estimated(sample_run: Run) -> None:
    before = clock_offsets(sample_run.events)
    after = clock_offsets(_shift_file(sample_run.events, "/slurmctld.log", PLANT_S))

    def of(df: pl.DataFrame) -> float:
        return float(df.filter(pl.col("unit").str.ends_with("/slurmctld.log"))["offset_s"][0])

    assert after.filter(pl.col("reference"))["unit"][0].endswith("/sacct.txt")
    assert of(after) - of(before) == pytest.approx(PLANT_S, abs=0.5)
    assert [u.rsplit("/", 1)[-1] for u in skewed(after)["unit"]] == ["slurmctld.log"]
    assert skewed(before).height == 0


def test_the_report_shows_the_skewed_file(sample_run: Run) -> None:
    ev = _shift_file(sample_run.events, "/slurmctld.log", PLANT_S)
    html = render_job_report(JobReportInput(sample_run.analysis, ev, sample_run.summary, clock_skew=clock_skew(ev)))
    section = html[html.index('id="clock-skew"'):]
    assert re.search(r'data-key="skewed-files">1<', section)
    row = re.search(r"<tr><td[^>]*>slurmctld\.log</td>.*?</tr>", section)
    assert row and "+40." in row.group(0) and "skewed" in row.group(0)
    plain = render_job_report(JobReportInput(sample_run.analysis, sample_run.events, sample_run.summary,
                                             clock_skew=clock_skew(sample_run.events)))
    assert re.search(r'data-key="skewed-files">0<', plain)


def test_an_offset_within_the_scatter_of_its_moments_is_not_flagged() -> None:
    """Two scheduler files whose job starts differ by 0 s or 3 s in turn: the offset (1.5 s) is
    over the threshold but no larger than how loosely the two mark one moment."""
    t0 = datetime(2024, 6, 1, tzinfo=UTC)
    rows = [(t0 + timedelta(hours=k, seconds=3 * (k % 2) * (f == "ctl.log")), f, str(k))
            for k in range(20) for f in ("acct.txt", "ctl.log")]
    ev = pl.DataFrame(rows, schema={"ts": pl.Datetime("us", "UTC"), "file": pl.String, "job_id": pl.String},
                      orient="row").with_columns(
        pl.lit(False).alias("ts_inferred"), pl.lit("job_start").alias("kind"), pl.lit("slurm").alias("source"),
        pl.lit(None, pl.String).alias("node"), pl.lit(None, pl.Int32).alias("attempt"),
        pl.lit(None, pl.Int64).alias("step"))
    off = clock_offsets(ev)
    ctl = off.filter(pl.col("unit") == "ctl.log").row(0, named=True)
    assert ctl["offset_s"] == pytest.approx(1.5) and ctl["spread_s"] == pytest.approx(1.5)
    assert skewed(off).height == 0
    shifted = clock_offsets(ev.with_columns(pl.when(pl.col("file") == "ctl.log").then(pl.col("ts") + pl.duration(
        seconds=10)).otherwise("ts").alias("ts")))
    assert skewed(shifted)["unit"].to_list() == ["ctl.log"]
