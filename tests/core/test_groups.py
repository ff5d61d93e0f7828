"""Small files read in groups give the table and reports they give one by one."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from toranalyze.cli.common import ingest_to
from toranalyze.ingest import groups, pipeline
from toranalyze.ingest.discover import InputFile
from toranalyze.ingest.pipeline import IngestOptions, Workers, ingest

DATA = Path(__file__).parent.parent / "data"


def _file(name: str, size: int) -> InputFile:
    return InputFile(name, size, 0.0)


def test_consecutive_small_files_share_a_group_and_big_ones_stand_alone() -> None:
    mb = 1 << 20
    files = [_file("a", 10), _file("b", 20), _file("big", 5 * mb), _file("c", 30), _file("d.gz", mb // 5)]
    assert [[f.path for f in g] for g in groups.grouped(files)] == [["a", "b"], ["big"], ["c"], ["d.gz"]]


def test_a_group_is_capped_by_files_and_text() -> None:
    files = [_file(f"f{i}", 100) for i in range(groups.GROUP_FILES + 3)]
    assert [len(g) for g in groups.grouped(files)] == [groups.GROUP_FILES, 3]
    near = groups.SMALL_FILE - 1
    many = [_file(f"n{i}", near) for i in range(40)]
    assert all(sum(f.size for f in g) <= groups.GROUP_TEXT for g in groups.grouped(many))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=3 << 20), max_size=200))
def test_groups_keep_every_file_in_order_within_their_bounds(sizes: list[int]) -> None:
    files = [_file(f"{i}.log", s) for i, s in enumerate(sizes)]
    found = groups.grouped(files)
    assert [f for g in found for f in g] == files
    for g in found:
        if len(g) > 1:
            assert all(groups.text_size(f) < groups.SMALL_FILE for f in g)
            assert sum(groups.text_size(f) for f in g) <= groups.GROUP_TEXT and len(g) <= groups.GROUP_FILES


def _reports(result: pipeline.IngestResult) -> list[dict[str, object]]:
    return [f.as_dict() for f in result.files]


@pytest.mark.parametrize("sink", [False, True], ids=["memory", "streamed"])
def test_grouped_reading_equals_reading_file_by_file(tmp_path: Path, sink: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = [str(DATA / d) for d in ("kernel", "slurm", "nccl")]
    def read(name: str) -> pipeline.IngestResult:
        return ingest_to(tmp_path / f"{name}.parquet", inputs, IngestOptions(), Workers()) if sink else ingest(inputs)

    together = read("together")
    assert any(len(g) > 1 for g in groups.grouped(pipeline.discover(inputs)[0]))
    monkeypatch.setattr(groups, "GROUP_FILES", 1)
    monkeypatch.setattr(groups, "ALONE_GROUP_FILES", 1)
    alone = read("alone")
    events = (lambda r: pl.read_parquet(r.events_path)) if sink else (lambda r: r.events)
    assert_frame_equal(events(together), events(alone))
    assert _reports(together) == _reports(alone)


def test_a_file_whose_events_cannot_be_classified_loses_only_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        (tmp_path / f"node{i}.log").write_text(
            f"Mar  4 08:41:39 gpu-00{i} kernel: [2966788.081880] NVRM: Xid (PCI:0000:07:00): 79, "
            "pid=1, GPU has fallen off the bus.\n"
        )
    classified = pipeline._classified

    def fails_on_node1(events: pl.DataFrame, rules: list) -> pl.DataFrame:  # type: ignore[type-arg]
        if events["file"].str.contains("node1").any():
            raise RuntimeError("rule engine broke")
        return classified(events, rules)

    monkeypatch.setattr(pipeline, "_classified", fails_on_node1)
    result = ingest([str(tmp_path)])
    by_name = {Path(f.path).name: f for f in result.files}
    assert "rule engine broke" in (by_name["node1.log"].error or "")
    assert by_name["node1.log"].events == 0
    assert by_name["node0.log"].events == by_name["node2.log"].events == 1
    assert sorted(Path(p).name for p in result.events["file"].to_list()) == ["node0.log", "node2.log"]


def test_files_finished_in_one_query_are_those_finished_alone() -> None:
    """finalize_files fills times, years, nodes and job ids within each file, as finalize_file."""
    from toranalyze.ingest.parser_rows import empty_parsed

    def rows(lines: list[tuple[int, str | None, bool, str | None]]) -> pl.DataFrame:
        base = empty_parsed()
        data = {"line": [n for n, *_ in lines],
                "ts": [None if t is None else pl.Series([t]).str.strptime(pl.Datetime("us"))[0] for _, t, _, _ in lines],
                "ts_year_known": [k for _, _, k, _ in lines], "job_id": [j for *_, j in lines],
                "kind": ["info"] * len(lines), "severity": ["info"] * len(lines), "message": ["m"] * len(lines),
                "ts_inferred": [False] * len(lines), "parser": ["p"] * len(lines), "source": ["kernel"] * len(lines)}
        return pl.DataFrame(data).select(
            [pl.col(c).cast(t) if c in data else pl.lit(None, t).alias(c) for c, t in base.schema.items()])

    parts = [
        (rows([(1, None, False, None), (2, "2023-12-31 23:59:00", True, "7"), (3, "2000-01-01 00:01:00", False, None)]),
         InputFile("run/nodes/gpu-1/kern.log", 10, 1.7e9)),
        (rows([(1, "2000-06-01 10:00:00", False, None), (2, None, False, "8"), (3, None, False, "9")]),
         InputFile("run/b.log", 10, 1.6e9)),
        (rows([]), InputFile("run/empty.log", 0, 1.6e9)),
        (rows([(5, "2024-02-29 10:00:00", True, None), (4, None, False, None)]), InputFile("run/c.log", 10, 1.6e9)),
    ]
    options = IngestOptions()
    together = pipeline.finalize_files(parts, options)
    for (parsed, file), got in zip(parts, together, strict=True):
        assert_frame_equal(got, pipeline.finalize_file(parsed, file, options))
