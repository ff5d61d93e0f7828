"""Engines: the local pool and Ray give the event table of a plain in-process read."""

from __future__ import annotations

import importlib.util
import os
import signal
import threading
import time

import polars as pl
import pytest

from toranalyze.cli.common import ingest_to
from toranalyze.errors import ConfigError, WorkerError
from toranalyze.ingest.engine import import_ray, map_ordered
from toranalyze.ingest.pipeline import IngestOptions, Workers, ingest
from toranalyze.model import load_preset
from toranalyze.simulate.command import Overrides, run_simulation

HAS_RAY = importlib.util.find_spec("ray") is not None


def _square(x: int) -> int:
    return x * x


def _killed(x: int) -> int:
    if x == 2:
        os._exit(9)  # as the out-of-memory killer would end it: no exception, no result
    return x


def _fleet(tmp_path):
    data = load_preset("small")
    data = {**data, "run": {**data["run"], "duration": "30min", "nodes": 1}}
    run_simulation(tmp_path / "fleet", 5, data, "small", Overrides(jobs=2))
    return tmp_path / "fleet"


def _sorted(events: pl.DataFrame) -> pl.DataFrame:
    return events.sort(["file", "line", "kind", "step", "message"], nulls_last=True)


def test_local_map_keeps_input_order():
    assert list(map_ordered(_square, [3, 1, 2], "local", 1)) == [9, 1, 4]


def test_a_worker_killed_midway_is_a_worker_error_with_the_next_step():
    with pytest.raises(WorkerError) as info:
        list(map_ordered(_killed, [1, 2, 3, 4], "local", 2))
    assert "jobs=1" in (info.value.hint or "") and "__main__" in info.value.message


def test_unknown_engine_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown engine"):
        list(map_ordered(_square, [1], "spark", 1))


@pytest.mark.skipif(HAS_RAY, reason="ray is installed: the missing-extra message cannot be shown")
def test_missing_ray_names_the_extra():
    with pytest.raises(ConfigError) as info:
        import_ray()
    assert "toranalyze[ray]" in (info.value.hint or "")


@pytest.mark.slow  # a Ray start-up plus two reads of a two-job fleet
@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install 'toranalyze[ray]')")
def test_ray_two_workers_equals_local(tmp_path):
    import ray

    fleet = _fleet(tmp_path)
    local = ingest([str(fleet)])
    t0 = time.perf_counter()
    try:
        distributed = ingest([str(fleet)], workers=Workers(2, "ray"))
        # the streamed table: Ray tasks write the parts, this process the table
        streamed = ingest_to(tmp_path / "out" / "events.parquet", [str(fleet)], IngestOptions(), Workers(2, "ray"))
    finally:
        ray.shutdown()
    assert streamed.events.equals(local.events)
    assert time.perf_counter() - t0 < 300
    assert local.events.height > 100
    assert [f.path for f in distributed.files] == [f.path for f in local.files]
    assert [(f.lines, f.events, f.covered) for f in distributed.files] == [
        (f.lines, f.events, f.covered) for f in local.files
    ]
    assert _sorted(distributed.events).equals(_sorted(local.events))


def _slow(x: int) -> int:
    time.sleep(30)
    return x


def test_ctrl_c_while_waiting_ends_the_workers_at_once():
    """Ctrl-C while the parent waits for a worker interrupts the wait and ends the workers
    mid-item: nothing waits for the 30 s of the items already started."""
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        list(map_ordered(_slow, [1, 2, 3, 4], "local", 2))
    timer.join()
    assert time.monotonic() - t0 < 8
