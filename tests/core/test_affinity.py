"""Regex-heavy steps run on long-lived threads, one per key (toranalyze/ingest/affinity.py)."""

from __future__ import annotations

import threading

import polars as pl
import pytest

from toranalyze.ingest.affinity import on_thread


def test_same_key_same_thread_and_other_key_other_thread():
    a1 = on_thread("test-a", lambda: threading.current_thread().ident)
    a2 = on_thread("test-a", lambda: threading.current_thread().ident)
    b = on_thread("test-b", lambda: threading.current_thread().ident)
    assert a1 == a2
    assert b != a1
    assert a1 != threading.current_thread().ident


def test_exceptions_reach_the_caller():
    def boom() -> None:
        raise ValueError("bad pattern")

    with pytest.raises(ValueError, match="bad pattern"):
        on_thread("test-a", boom)
    assert on_thread("test-a", lambda: 1) == 1  # the thread survives


def test_a_nested_call_with_the_same_key_runs_in_place():
    outer = on_thread("test-n", lambda: on_thread("test-n", lambda: threading.current_thread().name))
    assert outer.startswith("toranalyze-test-n")


def test_results_equal_the_calling_threads():
    df = pl.DataFrame({"text": ["NVRM: Xid (PCI:0000:3b:00): 79", "link down", None]})
    expr = pl.col("text").str.extract_groups(r"Xid \(PCI:(?P<pci>[0-9a-f:]+)\): (?P<code>\d+)")
    assert on_thread("test-a", lambda: df.select(expr)).equals(df.select(expr))
