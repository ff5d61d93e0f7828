"""Loss spikes derived from the step rows of one log."""

from __future__ import annotations

import math

import polars as pl

from toranalyze.ingest.derived import loss_spike_events
from toranalyze.schema import EVENT_SCHEMA


def _steps(losses: list[float], first_step: int = 1000, file: str = "a.log", ranks: int = 1) -> pl.DataFrame:
    rows = []
    line = 1
    for i, loss in enumerate(losses):
        for _ in range(ranks):
            rows.append({"kind": "step", "severity": "info", "source": "trainer", "parser": "trainer",
                         "step": first_step + i, "loss": loss, "file": file, "line": line, "message": "it"})
            line += 1
    return pl.DataFrame(rows, schema=EVENT_SCHEMA, strict=False)


def test_one_warning_per_excursion_of_numerics_class() -> None:
    out = loss_spike_events(_steps([2.2, 2.21, 2.19, 2.2, 5.1, 3.5, 3.2, 2.3, 2.2, 6.0]))
    assert out["step"].to_list() == [1004, 1009]
    row = out.row(0, named=True)
    assert (row["kind"], row["failure_class"], row["rule"], row["line"]) == ("warning", "numerics", "derived-loss-spike", 5)
    assert "2.3" in row["message"] or "2.32" in row["message"]  # the ratio to the baseline is stated


def test_noise_small_losses_nan_and_early_steps_are_not_spikes() -> None:
    assert loss_spike_events(_steps([2.2, 2.3, 2.1, 2.4, 2.2])).height == 0
    assert loss_spike_events(_steps([0.5, 0.5, 1.2, 0.5])).height == 0  # doubled but by less than 1 nat
    assert loss_spike_events(_steps([2.2, 2.2, math.nan, 2.2])).height == 0  # NaN has its own rule
    assert loss_spike_events(_steps([12.5, 11.0, 10.0, 38.9], first_step=1)).height == 0  # training start


def test_ranks_logging_the_same_step_count_once_and_files_are_separate() -> None:
    both = pl.concat([_steps([2.0, 2.0, 2.0, 6.0], ranks=4), _steps([6.0, 6.0, 6.0], file="b.log")])
    out = loss_spike_events(both)
    assert out.select("file", "step").rows() == [("a.log", 1003)]
