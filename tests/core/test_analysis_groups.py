"""Reconstructing the jobs in groups (as the Ray engine does) gives the analysis of the whole
table: every table frame-equal with exact floats, the notes in the same order."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from toranalyze.ingest.pipeline import ingest
from toranalyze.model import load_preset
from toranalyze.reconstruct import analysis as A
from toranalyze.simulate.command import Overrides, run_simulation

HAS_RAY = importlib.util.find_spec("ray") is not None
TABLES = ("attempts", "incidents", "slow_periods", "tor", "resources", "progress", "checkpoints")


@pytest.fixture(scope="module")
def fleet_events(tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    data = load_preset("small")
    data = {**data, "run": {**data["run"], "duration": "2h", "nodes": 1}}
    out: Path = tmp_path_factory.mktemp("groups") / "fleet"
    run_simulation(out, 7, data, "small", Overrides(jobs=4))
    return ingest([str(out)]).events


@pytest.fixture(scope="module")
def sample_events() -> pl.DataFrame:
    # Two jobs of equal values (the same run in its Slurm and Kubernetes flavours): one-row
    # groups of equal values concatenate into a scalar column, which polars divides otherwise.
    return ingest([str(Path(__file__).parents[2] / "sample_logs")]).events


def _assert_same(a: A.Analysis, b: A.Analysis) -> None:
    for t in TABLES:
        assert_frame_equal(getattr(a, t), getattr(b, t), check_exact=True)
    assert a.notes == b.notes


def _in_groups(events: pl.DataFrame, n: int, options: A.AnalysisOptions) -> A.Analysis:
    prepared = A.prepare_jobs(events)
    groups = A.job_groups(prepared, options, n)
    assert 1 <= len(groups) <= n
    return A.combine(prepared, [A.reconstruct_jobs(g) for g in groups], options)


@pytest.mark.parametrize("n", [2, 100])  # a few groups; one job each
@pytest.mark.parametrize("options", [A.AnalysisOptions(), A.AnalysisOptions(ideal_step_time_s=4.3217)])
def test_groups_equal_the_whole(fleet_events: pl.DataFrame, n: int, options: A.AnalysisOptions) -> None:
    whole = A.analyze_events(fleet_events, options)
    assert whole.tor.height == 4 and whole.incidents.height > 0
    _assert_same(_in_groups(fleet_events, n, options), whole)


@pytest.mark.parametrize("options", [A.AnalysisOptions(), A.AnalysisOptions(ideal_step_time_s=4.3217)])
def test_one_job_groups_of_equal_values(sample_events: pl.DataFrame, options: A.AnalysisOptions) -> None:
    whole = A.analyze_events(sample_events, options)
    assert whole.tor.height == 2 and whole.slow_periods.height == 2
    _assert_same(_in_groups(sample_events, 2, options), whole)


def test_groups_are_consecutive_and_balanced(fleet_events: pl.DataFrame) -> None:
    prepared = A.prepare_jobs(fleet_events)
    groups = A.job_groups(prepared, A.AnalysisOptions(), 2)
    codes = [g.jobs["job"].to_list() for g in groups]
    assert sum(codes, []) == prepared.jobs["job"].to_list()
    assert sum(g.events.height for g in groups) == prepared.events.height
    for g in groups:
        assert set(g.events["job"].unique().to_list()) <= set(g.jobs["job"].to_list())


def test_groups_of_a_job_ordered_table_are_its_slices(fleet_events: pl.DataFrame) -> None:
    """Events in job order are cut into slices; in any other order, into copies: the same groups."""
    prepared = A.prepare_jobs(fleet_events)
    assert prepared.events["job"].is_sorted()
    indexed = prepared.events.with_row_index("_i")
    shuffled = dataclasses.replace(prepared, events=indexed.sample(fraction=1.0, shuffle=True, seed=3))
    for n in (2, 3, 100):
        sliced = A.job_groups(prepared, A.AnalysisOptions(), n)
        copied = A.job_groups(shuffled, A.AnalysisOptions(), n)
        assert len(sliced) == len(copied) > 1
        for a, b in zip(sliced, copied, strict=True):
            assert_frame_equal(a.jobs, b.jobs)
            assert_frame_equal(a.events, b.events.sort("_i").drop("_i"))


@pytest.mark.parametrize("jobs", [2, 3])
def test_threads_equal_one(fleet_events: pl.DataFrame, sample_events: pl.DataFrame, jobs: int) -> None:
    """The local engine's threads (``jobs`` > 1: groups of jobs reconstructed side by side) give
    the one-thread analysis."""
    for events in (fleet_events, sample_events):
        _assert_same(A.analyze_events(events, jobs=jobs), A.analyze_events(events))


@pytest.mark.slow  # a Ray start-up and four simulated jobs' reconstruction
@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install 'toranalyze[ray]')")
def test_ray_two_workers_equals_local(fleet_events: pl.DataFrame) -> None:
    import ray

    try:
        distributed = A.analyze_events(fleet_events, engine="ray", jobs=2)
    finally:
        ray.shutdown()
    _assert_same(distributed, A.analyze_events(fleet_events))
