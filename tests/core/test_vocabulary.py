"""The failure vocabulary on lines no parser claims (ingest/vocabulary.py): the framer, the rules
marked ``anywhere``, size statements and runs of non-finite losses."""

from __future__ import annotations

import polars as pl

from toranalyze.ingest.vocabulary import frame, vocabulary_for, vocabulary_rows


def _rows(*texts: str) -> pl.DataFrame | None:
    lines = pl.DataFrame({"line": list(range(1, len(texts) + 1)), "text": list(texts)})
    return vocabulary_rows(lines, vocabulary_for(()))


def test_the_framer_peels_syslog_klog_and_json_envelopes_keeping_their_stamps() -> None:
    lines = pl.DataFrame({"line": [1, 2, 3], "text": [
        "Dec  6 18:44:12 gpu-3 kernel: NVRM: GPU has fallen off the bus.",
        'I0601 00:00:01.123456  1234 train.py:12] KeyError: x',
        '{"log":"RuntimeError: CUDA error: out of memory\\n","time":"2024-06-01T00:00:01.5Z"}']})
    out = frame(lines)
    assert out["message"].to_list() == ["NVRM: GPU has fallen off the bus.", "KeyError: x",
                                        "RuntimeError: CUDA error: out of memory"]
    assert out["ts_year_known"].to_list() == [False, False, True]


def test_known_failures_are_found_in_any_wrapper_and_healthy_lines_are_not() -> None:
    rows = _rows("gpu-001 | RuntimeError: CUDA error: out of memory", "Exception ignored in: <function>",
                 "epoch 3 finished, error rate 0.02", "WORLD_SIZE=16", "LOCAL_WORLD_SIZE=8")
    assert rows is not None
    assert rows.select("line", "kind", "n_gpus").rows() == [(1, "error", None), (4, "info", 16)]


def test_a_run_of_non_finite_losses_is_numerics_one_alone_is_not() -> None:
    healthy = _rows("step 10 loss: 2.31", "step 11 loss: nan", "step 12 loss: 2.29")
    assert healthy is None
    diverged = _rows("Loss 2.4", "Loss nan", "Loss nan", "Loss nan")
    assert diverged is not None and diverged["line"].to_list() == [2]
    assert diverged["message"][0].startswith("non-finite loss or gradient norm logged 3 times in a row")
    assert _rows("act_loss: inf|cri_loss: inf", "[Loss] nan | x") is not None  # prefixed names, brackets
