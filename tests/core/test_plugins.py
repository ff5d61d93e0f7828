"""The extension surface: every registered parser honours the contract; third parties plug in."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

from toranalyze.errors import AmbiguousParserError, PluginError
from toranalyze.ingest.contract import Parser
from toranalyze.ingest.lines import lines_from_strings
from toranalyze.ingest.registry import Registered, Registry, default_registry
from toranalyze.schema import KINDS, RAW_SCHEMA, SEVERITIES, validate_raw

REGISTRY = default_registry(refresh=True)
ALL = REGISTRY.entries()

SAMPLE_TEXT = [
    "plain text that means nothing",
    "[default0]: iteration       10/    1000 | elapsed time per iteration (ms): 1234.5 | lm loss: 2.5 |",
    "node1:123:456 [0] NCCL INFO comm 0x1 rank 0 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE",
    "\x00\x01 binary-ish \ufffd",
    "",
]


def test_builtins_are_registered_through_entry_points() -> None:
    names = {e.parser.name for e in ALL}
    assert {"slurm", "nccl", "kubernetes", "trainer", "kernel", "torch"} <= names
    for e in ALL:
        if e.parser.name in {"slurm", "nccl", "kubernetes", "trainer", "kernel", "torch"}:
            assert e.distribution == "toranalyze"
            assert e.entry_point.startswith("toranalyze_parsers.")


@pytest.mark.parametrize("entry", ALL, ids=[e.parser.name for e in ALL])
def test_parser_contract(entry: Registered, tmp_path: Path) -> None:
    parser = entry.parser
    assert isinstance(parser.name, str) and parser.name
    assert isinstance(parser.source, str) and parser.source
    assert parser.sniff("") in (True, False)
    assert parser.sniff("random words\nmore words\n") is False
    out = parser.extract(lines_from_strings(SAMPLE_TEXT).lazy())
    if out is not None:
        validate_raw(out, parser.name)
        df = out.collect()
        assert set(df["kind"].unique().to_list()) <= set(KINDS)
        assert set(df["severity"].unique().to_list()) <= set(SEVERITIES)
        assert df["line"].null_count() == 0
    # parse() of a text file returns the raw schema plus provenance columns, lazily
    f = tmp_path / "x.log"
    f.write_text("\n".join(SAMPLE_TEXT) + "\n")
    lf = parser.parse(str(f))
    assert isinstance(lf, pl.LazyFrame)
    schema = lf.collect_schema()
    for col, dtype in RAW_SCHEMA.items():
        assert schema[col] == dtype
    for pattern in getattr(parser, "noise", ()):
        pl.Series(["x"]).str.contains(pattern)  # every noise regex compiles in polars


def test_ambiguous_document_claims_name_the_candidates() -> None:
    class A(Parser):
        name, source = "a", "x"

        def sniff(self, head: str) -> bool:
            return head.startswith("DOC")

    class B(A):
        name = "b"

    reg = Registry()
    reg.register(A())
    reg.register(B())
    with pytest.raises(AmbiguousParserError) as info:
        reg.choose("f.txt", "DOC header")
    assert info.value.candidates == ["a", "b"]
    assert "--parser" in (info.value.hint or "")
    assert reg.choose("f.txt", "DOC header", forced="b")[1][0].name == "b"


def test_shadowing_a_name_is_refused() -> None:
    class A(Parser):
        name, source = "slurm", "x"

    reg = Registry(list(ALL))
    with pytest.raises(PluginError, match="two parsers are named 'slurm'"):
        reg.register(A(), distribution="evil")


THIRD_PARTY = '''
import polars as pl
from toranalyze.parser_api import Parser, conform_raw


class WidgetParser(Parser):
    """Reads 'WIDGET-FAIL <node>' lines of an in-house health checker."""
    name = "widget"
    source = "widget"

    def extract(self, lines):
        hits = lines.filter(pl.col("text").str.contains("WIDGET-FAIL", literal=True))
        return conform_raw(hits.select(
            pl.col("line"),
            pl.lit("error").alias("kind"),
            pl.lit("error").alias("severity"),
            pl.col("text").str.extract(r"WIDGET-FAIL (\\S+)", 1).alias("node"),
            pl.col("text").alias("message"),
        ))


parser = WidgetParser()
'''

WIDGET_RULES = '''
[[rule]]
id = "widget-fail"
class = "host_hardware"
source = "widget"
match = "WIDGET-FAIL"
'''


def _install_out_of_tree(root: Path) -> None:
    """A real distribution on sys.path: module + dist-info with an entry point."""
    (root / "widget_parser.py").write_text(textwrap.dedent(THIRD_PARTY))
    info = root / "widget_parser-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: widget-parser\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text("[toranalyze.parsers]\nwidget = widget_parser:parser\n")


def test_third_party_parser_is_discovered_and_used(tmp_path: Path) -> None:
    plugin_root = tmp_path / "site"
    plugin_root.mkdir()
    _install_out_of_tree(plugin_root)
    (tmp_path / "rules.toml").write_text(WIDGET_RULES)
    log = tmp_path / "health.log"
    log.write_text("all fine\nWIDGET-FAIL gpu-node-7 fan stalled\n")
    env = {**os.environ, "PYTHONPATH": str(plugin_root)}
    listing = subprocess.run([sys.executable, "-m", "toranalyze", "parsers"], env=env,
                             capture_output=True, text=True, check=True)
    assert "widget" in listing.stdout and "1.2.3" in listing.stdout
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "toranalyze", "ingest", str(log), "-o", str(out), "-q",
                    "--rules", str(tmp_path / "rules.toml")], env=env, check=True, capture_output=True)
    events = pl.read_parquet(out / "events.parquet")
    row = events.filter(pl.col("parser") == "widget").row(0, named=True)
    assert row["node"] == "gpu-node-7"
    assert row["failure_class"] == "host_hardware"
    assert row["rule"] == "widget-fail"
    assert row["line"] == 2
