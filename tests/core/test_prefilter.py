"""The multi-pattern prefilter (ingest/prefilter.py): it may keep lines no pattern matches, never
drop one that a pattern, and so a vocabulary row or a noise line, needs; with or without Hyperscan
the events are the same."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from toranalyze.ingest import prefilter
from toranalyze.ingest.lines import lines_from_strings
from toranalyze.ingest.noise import NoiseLines
from toranalyze.ingest.pipeline import ingest
from toranalyze.ingest.registry import default_registry
from toranalyze.ingest.vocabulary import _wanted, framed_rows, vocabulary_for, vocabulary_rows

DATA = Path(__file__).resolve().parents[1] / "data"
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Chatter no rule wants: an input pipeline's logger, health probes, NCCL's init lines.
CHATTER = [
    "2026-03-04 12:00:01,123 - data.loader - INFO - [worker 3] loaded /lustre/pile/shard-00123.arrow in 0.84 s",
    '10.42.3.17 - - [04/Mar/2026:12:00:01 +0000] "GET /healthz HTTP/1.1" 200 2 "-" "kube-probe/1.29"',
    'INFO:     10.42.0.1:51234 - "GET /metrics HTTP/1.1" 200 OK',
    "[probe] gpu-node-006 gpus=8/8 temp_max=59C power=372W util=89% ib0=up latency_ms=1.0",
    "gpu-node-008:41141:41216 [5] NCCL INFO Channel 01/0 : 5[5] -> 6[6] via P2P/CUMEM/read",
    "gpu-node-013:41227:41303 [6] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.42.0.7<0>",
]


def _real_lines(limit: int = 4000) -> list[str]:
    """Lines of the test inputs (every family's logs, the real excerpts), a seeded sample."""
    lines: list[str] = []
    for path in sorted(DATA.rglob("*")):
        if path.is_file() and path.suffix in (".log", ".txt", ".out", ".jsonl", ""):
            try:
                lines += [s for s in path.read_text(errors="replace").splitlines() if s.strip()]
            except OSError:
                continue
    random.Random(7).shuffle(lines)
    return lines[:limit]


REAL = _real_lines()
# Pieces of lines near the patterns: random joins get close to their edges.
PIECES = ["Traceback", "NCCL WARN ", "loss: nan", "grad_norm: inf", "WORLD_SIZE=8", '{"log":"', '\\"',
          "CUDA error: out of memory", "Got completion from peer", "NVRM: Xid", " | ", "\t", "é", "\\n"]
LINE = (st.sampled_from(REAL) | st.sampled_from(CHATTER)
        | st.lists(st.sampled_from(PIECES) | st.text(max_size=8), max_size=6).map("".join))


def _lines(texts: list[str]) -> pl.DataFrame:
    clean = [t.replace("\n", " ").replace("\r", " ") for t in texts]
    return pl.DataFrame({"line": list(range(1, len(clean) + 1)), "text": clean})


@pytest.fixture(params=["hyperscan", "polars"])
def path_of(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test on both paths: Hyperscan's scan and the polars alternation."""
    if request.param == "hyperscan":
        if not prefilter.enabled():
            pytest.skip("hyperscan is not installed")
    else:
        monkeypatch.setenv("TORANALYZE_NO_HYPERSCAN", "1")
    return str(request.param)


def test_loosened_drops_assertions_only_outside_classes() -> None:
    assert prefilter.loosened(r"^\s*(?:<\d>)?\[\s*\d+\]$") == r"\s*(?:<\d>)?\[\s*\d+\]"
    assert prefilter.loosened(r"(?:^|[\s,{(])x\b") == r"(?:|[\s,{(])x"
    assert prefilter.loosened(r"[^^$\b]\\b") == r"[^^$\b]\\b"
    assert prefilter.loosened(r"[]^$]\Bx\z") == r"[]^$]x"
    assert prefilter.loosened(r"(?i-u:ab)") == r"(?i:ab)"


@SETTINGS
@given(st.lists(LINE, min_size=1, max_size=40))
def test_candidates_hold_every_line_a_pattern_matches(texts: list[str]) -> None:
    """Every line holding a match of a vocabulary or noise pattern is a candidate, on both paths."""
    lines = _lines(texts)["text"]
    patterns = (*_wanted(vocabulary_for(())), *(p for parser in default_registry().line_parsers()
                                                for p in getattr(parser, "noise", ())))
    for off in ("", "1"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TORANALYZE_NO_HYPERSCAN", off)
            kept = prefilter.candidate_lines(lines, patterns)
        for p in patterns:
            assert not (lines.str.contains(p) & ~kept).any(), f"dropped a line matching {p!r}"


@SETTINGS
@given(st.lists(LINE, min_size=1, max_size=60))
def test_the_vocabulary_finds_the_rows_it_finds_on_every_line(texts: list[str]) -> None:
    """The prefilter never drops a line the vocabulary would have turned into a row."""
    lines, vocab = _lines(texts), vocabulary_for(())
    whole = framed_rows(lines, vocab)
    for off in ("", "1"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TORANALYZE_NO_HYPERSCAN", off)
            mp.setattr(prefilter, "WORTH", 0)  # prefilter however few the lines
            got = vocabulary_rows(lines, vocab)
        assert (got is None) == (whole is None)
        if got is not None and whole is not None:
            assert_frame_equal(got, whole)


@SETTINGS
@given(st.lists(LINE, min_size=1, max_size=60))
def test_noise_lines_are_the_same_with_the_prefilter(texts: list[str]) -> None:
    parsers = default_registry().line_parsers()
    prepared = lines_from_strings([t.replace("\n", " ") for t in texts])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORANALYZE_NO_HYPERSCAN", "1")
        alone = NoiseLines.of(parsers)(prepared).sort()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prefilter, "WORTH", 0)
        assert NoiseLines.of(parsers)(prepared).sort().equals(alone)


def test_the_fallback_gives_the_same_events_and_reports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without Hyperscan (the polars tests on every line), every family's inputs give identical
    events and reports."""
    chatter = tmp_path / "chatter.log"
    chatter.write_text("\n".join(CHATTER * 50 + REAL[:300]) + "\n")
    inputs = [str(DATA / d) for d in ("trainer", "nccl", "torch", "slurm", "kernel", "real_excerpts")]
    inputs.append(str(chatter))
    monkeypatch.setattr(prefilter, "WORTH", 0)  # every block prefiltered, however small
    fast = ingest(inputs)
    monkeypatch.setenv("TORANALYZE_NO_HYPERSCAN", "1")
    slow = ingest(inputs)
    assert_frame_equal(fast.events, slow.events)
    assert [f.as_dict() for f in fast.files] == [f.as_dict() for f in slow.files]


def test_candidate_lines_on_both_paths_keep_non_ascii_lines(path_of: str) -> None:
    texts = pl.Series("text", ["plain chatter", "résumé written", "CUDA error: out of memory", None])
    kept = prefilter.candidate_lines(texts, ("CUDA error",))
    assert kept.to_list()[0] is False and kept.to_list()[2] is True
    assert kept.to_list()[1] is (path_of == "hyperscan")  # the polars path searches it exactly
