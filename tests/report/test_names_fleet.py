"""Short job names, and the fleet report's own estimators on small hand-made tables."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from scipy import stats

from toranalyze.fleet.schema import EXPOSURE_SCHEMA, FLEET_INCIDENTS_SCHEMA
from toranalyze.report.fleet import _link, class_rates, lemon_nodes, loglog_fit


def test_one_file_is_named_after_its_stem(tmp_path: Path) -> None:
    from toranalyze.reconstruct.job_names import short_job_names

    f = tmp_path / "timelines" / "trainer_rank0.log"
    f.parent.mkdir()
    f.write_text("x")
    key = f"{f.parent}::"
    assert short_job_names([key], [str(f)]) == {key: "trainer_rank0"}


def test_names_are_short_and_prefixed_only_when_ambiguous(tmp_path: Path) -> None:
    from toranalyze.reconstruct.job_names import short_job_names

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    keys = [f"{tmp_path}/a::gpt", f"{tmp_path}/b::gpt", f"{tmp_path}/b::731400", f"{tmp_path}/b::"]
    names = short_job_names(keys, [str(tmp_path)])
    assert names == {keys[0]: "a/gpt", keys[1]: "b/gpt", keys[2]: "731400", keys[3]: "b"}


def test_renaming_keeps_every_field_and_renames_notes(tmp_path: Path) -> None:
    from toranalyze.reconstruct.analysis import RESOURCES_SCHEMA, Analysis
    from toranalyze.reconstruct.job_names import job_keys, rename_jobs, short_job_names

    key, other = f"{tmp_path}::gpt", f"{tmp_path}::731348"
    frame = pl.DataFrame({"job": [key]})
    resources = pl.DataFrame({"job": [key]}).select(
        [pl.col("job") if c == "job" else pl.lit(None, t).alias(c) for c, t in RESOURCES_SCHEMA.items()])
    an = Analysis(attempts=frame, incidents=frame, slow_periods=frame, tor=frame, resources=resources,
                  notes=[f"job {other!r}: scheduler records only, no training records; not analysed"])
    assert job_keys(an) == sorted([key, other])
    renamed = rename_jobs(an, short_job_names(job_keys(an), [str(tmp_path)]))
    assert renamed.resources["job"].to_list() == ["gpt"]  # the fleet's exposure is built on it
    assert renamed.tor["job"].to_list() == ["gpt"]
    assert renamed.notes == ["job '731348': scheduler records only, no training records; not analysed"]


def _incidents(rows: list[dict]) -> pl.DataFrame:
    base = {"run": "r", "job": "j", "incident": 0, "attempt": 0, "planned": False, "evidence": ["f.log:1"],
            "t_last_progress": datetime(2024, 1, 1, tzinfo=UTC)}
    return pl.DataFrame([{**base, **r} for r in rows]).select(
        [pl.col(c).cast(t) if c in [*base, *rows[0]] else pl.lit(None, t).alias(c)
         for c, t in FLEET_INCIDENTS_SCHEMA.items()])


def _exposure(nodes: dict[str, float], gpus: int = 8) -> pl.DataFrame:
    return pl.DataFrame([{"run": "r", "job": "j", "attempt": 0, "node": n, "hours": h, "gpus": gpus, "nodes": 1,
                          "gpu_hours": h * gpus, "node_hours": h, "job_gpus": gpus * len(nodes)}
                         for n, h in nodes.items()]).select(
        [pl.col(c).cast(t) if c not in ("t_start", "t_end") else pl.lit(None, t).alias(c)
         for c, t in EXPOSURE_SCHEMA.items()])


def test_class_rates_use_exact_poisson_intervals() -> None:
    inc = _incidents([{"root_cause": "gpu_hardware"}] * 3 + [{"root_cause": "network"}])
    exp = _exposure({"n1": 250.0}, gpus=4)  # 1000 GPU-hours
    r = class_rates(inc, exp).sort("root_cause").row(0, named=True)
    assert r["n"] == 3 and r["rate"] == pytest.approx(3.0)
    assert r["lo"] == pytest.approx(stats.chi2.ppf(0.025, 6) / 2)
    assert r["hi"] == pytest.approx(stats.chi2.ppf(0.975, 8) / 2)


def test_lemon_nodes_stand_out_from_their_hours() -> None:
    nodes = {f"n{i:02d}": 100.0 for i in range(40)}
    rows = [{"root_cause": "gpu_memory", "nodes": ["n07"], "incident": k} for k in range(6)]
    rows += [{"root_cause": "network", "nodes": [f"n{k:02d}"], "incident": 10 + k} for k in (1, 2, 3)]
    rows += [{"root_cause": "preemption", "planned": True, "nodes": ["n09"] , "incident": 20 + k} for k in range(9)]
    lem = lemon_nodes(_incidents(rows), _exposure(nodes))
    assert lem["node"].to_list() == ["n07"]  # planned stops never make a lemon
    assert lem["failures"][0] == 6 and lem["p"][0] < 1e-4


def test_loglog_fit_recovers_a_power_law() -> None:
    import numpy as np

    x = np.array([8.0, 64.0, 512.0, 4096.0])
    a, b = loglog_fit(x, 1000.0 * x ** -0.9, np.ones(4))  # type: ignore[misc]
    assert b == pytest.approx(-0.9) and a == pytest.approx(np.log(1000.0))
    assert loglog_fit(x[:1], x[:1], x[:1]) is None


@pytest.mark.parametrize("href", ["javascript:alert(1)", "JaVaScRiPt:x", "data:text/html,x", "//evil/x",
                                  "https://x/y"])
def test_job_links_are_relative_paths_only(href: str) -> None:
    assert "<a " not in _link("job", href)


def test_job_link_is_encoded_and_escaped() -> None:
    out = _link('j<"x>', 'run "1"/<b>/report.html')
    assert out == '<a href="run%20%221%22/%3Cb%3E/report.html">j&lt;&quot;x&gt;</a>'
