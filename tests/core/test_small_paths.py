"""The small-block shortcuts give what the general paths give."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from toranalyze.ingest import blocks, gates, noise
from toranalyze.ingest.lines import prepare_lines
from toranalyze.ingest.registry import default_registry

kernel = importlib.import_module("toranalyze_parsers.kernel")
peel_prefixes = importlib.import_module("toranalyze_parsers.kernel.prefix").peel_prefixes

DATA = Path(__file__).parent.parent / "data"
LOGS = sorted(
    p for d in ("kernel", "real_excerpts") for p in (DATA / d).rglob("*") if p.is_file() and p.suffix != ".toml"
)


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_small_gates_and_detector_tests_match_the_general_ones(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parsers = default_registry().line_parsers()
    prepared = prepare_lines(next(iter(blocks.Chunks(str(path)))))
    small = [p.name for p in gates.gated(prepared, parsers)]
    monkeypatch.setattr(gates, "_GATE_PROBE", 0)  # every block takes the general path
    assert small == [p.name for p in gates.gated(prepared, parsers)]

    peeled = peel_prefixes(prepared.lazy()).collect()
    python_tests = kernel._wanted(peeled)
    monkeypatch.setattr(kernel, "_PYTHON_GATES", -1)
    assert python_tests == kernel._wanted(peeled)


prefix = importlib.import_module("toranalyze_parsers.kernel.prefix")

# One kernel line behind each layout the prefix peeler knows (prefix.CLOCKS and the other layers).
LAYOUT_LINES = [
    "2024-06-18T02:41:07.123456+02:00 gpu-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    "Tue 2024-06-18 02:41:07 UTC gpu-01 kernel: mlx5_core 0000:3b:00.0: Port module event: Cable unplugged",
    "1718678467.123456 gpu-01 kernel: [ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 48, DBE",
    "[Mon Dec  6 18:44:12 2021] NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
    "[Jul 23 2024 07:53:55] [ERROR] [tid 841] NVLink fatal error detected",
    "Dec  6 18:44:12 gpu-01 kernel: [ 1234.567890] mlx5_core 0000:3b:00.0: Link down",
    "talos-1: kern: err: [2024-06-18T02:41:07.123Z]: NVRM: Xid (PCI:0000:3b:00): 79",
    "[Dec 6 18:44] NVRM: Xid (PCI:0000:3b:00): 31, Ch 00000008",
    "[  +0.000316] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
    "kern  :err   : [ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79",
    "kern  :err   : 2024-06-18T02:41:07,123456+02:00 NVRM: Xid (PCI:0000:3b:00): 79",
    "<3>[ 1234.567890] gpu-01 kernel: NVRM: GPU at PCI:0000:3b:00: GPU-abc",
    '{"__REALTIME_TIMESTAMP":"1718678467123456","_HOSTNAME":"n3","MESSAGE":"NVRM: Xid 79","_TRANSPORT":"kernel"}',
    "NVRM: Xid (PCI:0000:3b:00): 79, no prefix at all",
]


def _peeled_both_ways(raw: list[str]) -> tuple[object, object]:
    import polars as pl

    prepared = prepare_lines(pl.DataFrame({"line": list(range(1, len(raw) + 1)), "raw": raw}))
    journal = bool(prepared["text"].str.starts_with("{").any())
    return prefix.peeled(prepared), peel_prefixes(prepared.lazy(), journal_json=journal).collect()


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_peeling_planned_for_the_layouts_held_equals_the_general_peeling(path: Path) -> None:
    from polars.testing import assert_frame_equal

    prepared = prepare_lines(next(iter(blocks.Chunks(str(path)))))
    journal = bool(prepared["text"].str.starts_with("{").any())
    assert_frame_equal(prefix.peeled(prepared), peel_prefixes(prepared.lazy(), journal_json=journal).collect())


@pytest.mark.parametrize("first", range(len(LAYOUT_LINES)))
def test_peeling_each_layout_with_each_other_equals_the_general_peeling(first: int) -> None:
    from polars.testing import assert_frame_equal

    if first == 0:  # the lines hold every layout
        import polars as pl

        lines = prepare_lines(pl.DataFrame({"line": list(range(len(LAYOUT_LINES))), "raw": LAYOUT_LINES})).lazy()
        for step in prefix._peel_steps(True):
            lines = lines.with_columns(step)
        assert prefix._held(lines.collect(), True) == prefix.ALL_LAYERS
    alone = _peeled_both_ways([LAYOUT_LINES[first]])
    assert_frame_equal(*alone)
    for second in range(len(LAYOUT_LINES)):
        assert_frame_equal(*_peeled_both_ways([LAYOUT_LINES[first], LAYOUT_LINES[second]]))
    assert_frame_equal(*_peeled_both_ways(LAYOUT_LINES))


def _all_test_lines() -> object:
    import polars as pl

    texts = [ln for p in sorted(DATA.rglob("*")) if p.is_file() and p.suffix in {".log", ".txt", ".out"}
             for ln in p.read_text(errors="replace").splitlines()]
    return prepare_lines(pl.DataFrame({"line": list(range(1, len(texts) + 1)), "raw": texts}))


@pytest.mark.parametrize("order_seed", range(6))
def test_noise_cascade_finds_the_lines_the_or_of_all_alternations_finds(order_seed: int) -> None:
    import random

    parsers = default_registry().line_parsers()
    lines = _all_test_lines()
    cascade = noise.NoiseLines.of(parsers)
    cascade.hits = random.Random(order_seed).sample(range(100), len(cascade.tests))  # any search order
    mask = noise.noise_mask(parsers)
    assert mask is not None
    expected = sorted(lines.filter(mask)["line"].to_list())
    assert len(expected) > 50
    assert sorted(cascade(lines).to_list()) == expected
    assert sorted(cascade(lines).to_list()) == expected  # the order the first call learnt
