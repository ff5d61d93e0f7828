"""Each stage of the analysis hands on the frame its contract names (reconstruct/contracts.py), and
no temporary ``_`` column leaves the function that made it: the sample runs and a freshly
simulated small run of each scheduler flavour, analysed with checking on."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import toranalyze.reconstruct
from toranalyze.ingest.pipeline import ingest
from toranalyze.model import load_preset
from toranalyze.reconstruct import analysis as A
from toranalyze.reconstruct import contracts as c
from toranalyze.reconstruct import stages
from toranalyze.simulate.command import Overrides, run_simulation

SAMPLES = Path(__file__).parents[2] / "sample_logs"


@pytest.fixture(scope="module", params=["slurm", "kubernetes"])
def simulated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    data = load_preset("small")
    data = {**data, "run": {**data["run"], "duration": "90m", "nodes": 2}}
    out: Path = tmp_path_factory.mktemp("contracts") / request.param
    run_simulation(out, 11, data, "small", Overrides(flavor=request.param))
    return ingest([str(out)]).events


@pytest.fixture(scope="module")
def samples() -> pl.DataFrame:
    return ingest([str(SAMPLES)]).events


@pytest.fixture(autouse=True)
def checking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(stages.ENV, "1")


def _analysed_with_every_stage(events: pl.DataFrame, jobs: int) -> A.Analysis:
    stages.EXERCISED.clear()
    a = A.analyze_events(events, jobs=jobs)  # every stage checks its frames (ContractError)
    assert set(stages.EXERCISED) == stages.STAGES, f"not run: {sorted(stages.STAGES - set(stages.EXERCISED))}"
    return a


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_sample_runs_keep_every_contract(samples: pl.DataFrame, jobs: int) -> None:
    a = _analysed_with_every_stage(samples, jobs)
    assert a.incidents.height > 0 and a.tor.height == 2


def test_a_simulated_run_keeps_every_contract(simulated: pl.DataFrame) -> None:
    a = _analysed_with_every_stage(simulated, 1)
    assert a.tor.height == 1 and a.attempts.height >= 1


def test_the_prepared_events_and_the_run_tables_carry_no_temporary_column(samples: pl.DataFrame) -> None:
    prepared = A.prepare_jobs(samples)
    c.check(prepared.events, c.PreparedEventRows)
    c.check(prepared.jobs, c.Jobs)
    a = A.analyze_events(samples)
    for frame in (a.attempts, a.incidents, a.slow_periods, a.tor, a.resources, a.progress, a.checkpoints):
        assert frame is not None
        assert not [col for col in frame.columns if col.startswith("_")]


def test_a_temporary_column_breaks_the_contract() -> None:
    frame = pl.DataFrame({"job": [0], "T0": [1], "T1": [2], "_scratch": [3]},
                         schema={"job": pl.UInt32, "T0": pl.Int64, "T1": pl.Int64, "_scratch": pl.Int64})
    with pytest.raises(c.ContractError, match="_scratch"):
        c.check(frame, c.JobWindows)
    c.check(frame.drop("_scratch"), c.JobWindows)


def test_a_missing_or_mistyped_column_breaks_the_contract() -> None:
    with pytest.raises(c.ContractError):
        c.check(pl.DataFrame({"job": [0], "T0": [1]}, schema={"job": pl.UInt32, "T0": pl.Int64}), c.JobWindows)
    with pytest.raises(c.ContractError):
        c.check(pl.DataFrame({"job": ["a"], "T0": [1], "T1": [2]}), c.JobWindows)


def test_checking_off_costs_nothing_and_checks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(stages.ENV, "0")
    frame = pl.DataFrame({"_x": [1]})
    assert stages.check(frame, "JobWindows") is frame


def test_a_normal_run_does_not_load_the_contracts() -> None:
    import subprocess
    import sys

    code = ("import sys, polars as pl; from toranalyze.reconstruct.analysis import analyze_events;"
            "print('dataframely' in sys.modules)")
    env = {k: v for k, v in __import__("os").environ.items() if k != stages.ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"


# Helpers that return the aggregations the caller names (its own temporaries, dropped by it).
CALLERS_COLUMNS = {"intervals.agg_by"}


def _frames(x: Any, depth: int = 0) -> Iterator[pl.DataFrame | pl.LazyFrame]:
    if isinstance(x, pl.DataFrame | pl.LazyFrame):
        yield x
    elif isinstance(x, tuple | list) and depth < 2:
        for y in x:
            yield from _frames(y, depth + 1)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type) and depth < 2:
        for f in dataclasses.fields(x):
            yield from _frames(getattr(x, f.name), depth + 1)


def _hidden(*values: Any) -> set[str]:
    cols = [c for v in values for f in _frames(v)
            for c in (f.collect_schema().names() if isinstance(f, pl.LazyFrame) else f.columns)]
    return {c for c in cols if c.startswith("_")}


def test_no_function_of_reconstruct_hands_out_a_temporary_column(
        samples: pl.DataFrame, simulated: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every function of reconstruct (public or private, as the stages call it): a ``_`` column in
    what it returns came in with its arguments (a helper that passes frames through), never one
    it made."""
    leaks: dict[str, set[str]] = {}

    def watched(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            made = _hidden(out) - _hidden(*args, *kwargs.values())
            if made and name not in CALLERS_COLUMNS:
                leaks.setdefault(name, set()).update(made)
            return out
        return run

    modules = [importlib.import_module(f"toranalyze.reconstruct.{m.name}")
               for m in pkgutil.iter_modules(toranalyze.reconstruct.__path__)]
    for mod in modules:
        short = mod.__name__.rsplit(".", 1)[-1]
        for name, fn in list(vars(mod).items()):
            if inspect.isfunction(fn) and fn.__module__ == mod.__name__:
                wrapped = watched(f"{short}.{name}", fn)
                for other in modules:  # wherever it is looked up
                    if vars(other).get(name) is fn:
                        monkeypatch.setattr(other, name, wrapped)
    for events in (samples, simulated):
        A.analyze_events(events)
        A.analyze_events(events, jobs=2)
    assert not leaks
