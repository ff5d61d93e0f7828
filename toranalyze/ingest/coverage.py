"""Which lines of a text log no parser recognised, and their most common shapes.

Coverage in the ingest summary is a count; this is the list behind it, for people extending
parsers or rules (``toranalyze coverage PATH``) and for tests that hold simulated logs to a
coverage bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from toranalyze.ingest.blocks import Chunks
from toranalyze.ingest.lines import prepare_lines
from toranalyze.ingest.noise import noise_mask
from toranalyze.ingest.parser_rows import covered_lines
from toranalyze.ingest.reader import read_text_events


def uncovered_lines(path: str, parsers: Sequence[Any]) -> pl.DataFrame:
    """Frame (line, raw) of the lines of a text log that no parser covered (blank ones left out)."""
    events = read_text_events(path, parsers).events
    covered = covered_lines(events).unique().to_frame("line")
    noise = noise_mask(parsers)
    frames = []
    for chunk in Chunks(path):
        prepared = prepare_lines(chunk)
        if noise is not None:
            prepared = prepared.filter(~noise)
        frames.append(
            # a line that is only a launcher prefix ('[rank3]:') carries nothing to recognise
            prepared.filter(pl.col("text").str.strip_chars().str.len_bytes() > 0)
            .select("line", "raw")
            .join(covered, on="line", how="anti")
            .unique("line", keep="first", maintain_order=True)
        )
    return pl.concat(frames) if frames else pl.DataFrame(schema={"line": pl.Int64, "raw": pl.String})


def line_shapes(lines: pl.DataFrame, top: int = 20) -> pl.DataFrame:
    """Most common shapes (numbers -> N, hex -> H) of the given lines, with the first place seen
    (the ``where`` column when the frame has one, else the line number)."""
    shape = (
        pl.col("raw")
        .str.replace_all(r"0x[0-9a-fA-F]+", "H")
        .str.replace_all(r"[0-9]+", "N")
        .str.slice(0, 160)
    )
    return (
        lines.with_columns(shape.alias("shape"))
        .group_by("shape")
        .agg(pl.len().alias("count"), pl.col("where" if "where" in lines.columns else "line").first().alias("first"))
        .sort(["count", "shape"], descending=[True, False])
        .head(top)
    )
