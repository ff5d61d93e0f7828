"""Inputs the mutation fuzzer (tests/fuzz) found a fault with, each kept as a regression test."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from toranalyze.ingest.pipeline import IngestOptions, ingest
from toranalyze.ingest.registry import default_registry


@pytest.mark.timeout(20)
def test_many_blank_lines_before_no_yaml_key_do_not_hang_the_kubernetes_sniff(tmp_path: Path) -> None:
    head = "\n" * 40 + "  \n" * 40 + "not yaml\n"
    assert default_registry().get("kubernetes").sniff(head) is False
    path = tmp_path / "blank.log"
    path.write_text(head * 3 + "slurmstepd: error: *** JOB 42 ON node7 CANCELLED AT 2024-03-01T10:00:00 DUE TO TIME LIMIT ***\n")
    result = ingest([str(path)], IngestOptions())
    assert result.files[0].error is None and result.events.height


NODE_STATUS_CUT = (  # a node's conditions as YAML, cut inside a message: the line rules give no message
    '      type: PIDPressure\n    - lastHeartbeatTime: "2024-03-14T10:19:18Z"\n'
    '      lastTransitionTime: "2024-03-14T10:20:04Z"\n      message: Kubelet stopped posting node'
)
GOOD = "slurmstepd: error: *** JOB 42 ON node7 CANCELLED AT 2024-03-01T10:00:00 DUE TO TIME LIMIT ***\n"


def test_a_row_a_parser_could_not_fill_is_dropped_not_its_file(tmp_path: Path) -> None:
    path = tmp_path / "mixed.log"
    path.write_text(GOOD + NODE_STATUS_CUT + "\n")
    (report,) = (result := ingest([str(path)], IngestOptions())).files
    assert report.error is None
    assert result.events.filter(pl.col("parser") == "slurm").height >= 1


def test_a_document_nested_too_deeply_is_skipped_with_the_reason(tmp_path: Path) -> None:
    doc = tmp_path / "watch.json"
    doc.write_text('{"type":"ADDED","object":{"apiVersion":"v1","kind":"Event","metadata":{}}}\n' + "[" * 20000)
    (tmp_path / "job.log").write_text(GOOD)
    result = ingest([str(tmp_path)], IngestOptions())
    errors = {Path(f.path).name: f.error for f in result.files}
    assert errors["job.log"] is None
    assert "nests too deeply" in (errors["watch.json"] or ""), errors


@pytest.mark.parametrize("stamp", ["+275760-09-13T00:00:00Z", "9999-12-31T23:59:59.999999Z", "0000-01-01T00:00:00"])
def test_an_impossible_stamp_is_no_clock_and_the_run_is_read(tmp_path: Path, stamp: str) -> None:
    (tmp_path / "job.log").write_text(GOOD)
    (tmp_path / "odd.log").write_text(f"{stamp} gpu-001 RuntimeError: CUDA error: an illegal memory access\n")
    result = ingest([str(tmp_path)], IngestOptions())
    assert [f.error for f in result.files] == [None, None]
    odd = result.events.filter(pl.col("file").str.ends_with("odd.log"))
    assert odd.height and odd["ts"].is_null().all()


PODS = (Path(__file__).resolve().parents[1] / "data" / "kubernetes" / "pods_list.yaml").read_text()


def test_an_integer_past_its_column_in_one_api_object_loses_that_value_only(tmp_path: Path) -> None:
    clean, broken = tmp_path / "clean.yaml", tmp_path / "broken.yaml"
    clean.write_text(PODS)
    broken.write_text(re.sub(r"restartCount: [0-9]+", "restartCount: 34359738368", PODS, count=1))
    assert broken.read_text() != PODS
    expected, got = ingest([str(clean)], IngestOptions()), ingest([str(broken)], IngestOptions())
    assert got.files[0].error is None, got.files[0].error
    assert got.events.height == expected.events.height


def test_an_api_object_time_no_calendar_has_is_no_time(tmp_path: Path) -> None:
    clean, broken = tmp_path / "clean.yaml", tmp_path / "broken.yaml"
    clean.write_text(PODS)
    stamps = re.findall(r"startedAt: \"?([0-9T:-]+)", PODS)
    assert stamps
    broken.write_text(PODS.replace(stamps[0], "2024-02-30T25:00:00"))
    expected, got = ingest([str(clean)], IngestOptions()), ingest([str(broken)], IngestOptions())
    assert got.files[0].error is None, got.files[0].error
    assert expected.events.height - 1 <= got.events.height <= expected.events.height  # its row at most


WATCH = (Path(__file__).resolve().parents[1] / "data" / "kubernetes" / "events_watch_envelopes.jsonl").read_text()


@pytest.mark.parametrize("count", ["1" * 15000, "99999999999999999999.5"], ids=["15,000 digits", "1e20"])
def test_a_number_no_field_holds_in_a_watch_stream_loses_that_value_only(tmp_path: Path, count: str) -> None:
    found = re.search(r'"count": ?[0-9]+', WATCH)
    assert found
    clean, broken = tmp_path / "clean.json", tmp_path / "broken.json"
    clean.write_text(WATCH)
    broken.write_text(WATCH.replace(found.group(), f'"count": {count}', 1))
    expected, got = ingest([str(clean)], IngestOptions()), ingest([str(broken)], IngestOptions())
    assert got.files[0].error is None, got.files[0].error
    assert expected.events.height - 1 <= got.events.height <= expected.events.height


def _megatron(rows: list[tuple[int, str]]) -> str:
    return "".join(
        f"[2024-03-01 10:0{i}:00] iteration {step:>8}/ 9200000000000000000 | consumed samples: {step} | "
        f"elapsed time per iteration (ms): {ms} | learning rate: 1.000E-04 | global batch size: 8 | "
        "lm loss: 2.345E+00 | loss scale: 1.0 | number of skipped iterations: 0 | number of nan iterations: 0 |\n"
        for i, (step, ms) in enumerate(rows))


@pytest.mark.parametrize("rows", [
    # a step time of -inf, +inf and 1e308 ms (the fuzzer's: -inf overflowed the µs of a step span)
    [(10, "1234.5"), (20, "1234.5"), (30, "-1e999"), (40, "1e999"), (50, "1e308"), (60, "1234.5")],
    # step counters of 19 digits: their differences times a step's µs overflowed the ledger
    [(10, "1234.5"), (4 * 10**18, "1234.5"), (8 * 10**18, "900000"), (9 * 10**18, "1234.5")],
    # at the bounds kept: a trillion steps and a step of 900,000 s
    [(10, "1234.5"), (20, "1234.5"), (10**12 - 1, "900000000"), (10**12, "1234.5")],
], ids=["infinite-step-time", "nineteen-digit-steps", "at-the-bounds"])
def test_a_measure_no_run_can_give_is_null_and_the_run_is_analysed(tmp_path: Path, rows: list[tuple[int, str]]) -> None:
    from click.testing import CliRunner

    from toranalyze.cli import cli

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train.log").write_text(_megatron(rows))
    res = CliRunner().invoke(cli, ["analyze", str(tmp_path / "run"), "-o", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 0, res.output
    events = pl.read_parquet(tmp_path / "out" / "events.parquet")
    steps = events.filter(pl.col("kind") == "step")
    assert steps.height == len(rows)
    assert steps["step_time_s"].drop_nulls().is_between(0, 1e9).all()
    assert steps["step"].drop_nulls().is_between(0, 10**12).all()
