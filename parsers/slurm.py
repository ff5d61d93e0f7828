"""Slurm: job stdout/stderr records, slurmctld/slurmd logs, squeue watchdogs, and sacct tables.

Text logs go through ``extract`` (line rules in ``_slurm_lines``; sacct tables an
epilog printed into the log are read too). A file that *is* a sacct table is
claimed by ``sniff`` and read whole by ``parse``.

Parsers do not classify: ``toranalyze/rules/slurm.toml`` maps states and
messages to failure classes.
"""

from __future__ import annotations

import polars as pl

from toranalyze.plugins import Parser
from toranalyze.reader import HEAD_BYTES, read_text
from toranalyze.schema import conform_raw, empty_raw
from toranalyze_parsers import _slurm_sacct as sacct
from toranalyze_parsers._slurm_lines import NOISE, extract_slurm_lines


class SlurmParser(Parser):
    name = "slurm"
    source = "slurm"
    noise = NOISE

    def sniff(self, head: str) -> bool:
        return sacct.sniff(head)

    def extract(self, lines: pl.LazyFrame) -> pl.LazyFrame:
        found = [extract_slurm_lines(lines)]
        tables = sacct.tables_in_lines(lines)
        if tables is not None:
            found.append(tables)
        return conform_raw(pl.concat(found, how="diagonal_relaxed"))

    def parse(self, path: str) -> pl.LazyFrame:
        text = read_text(path)
        if not sacct.sniff(text[:HEAD_BYTES]):
            return super().parse(path)  # forced onto a text log: the line rules apply
        raw = text.splitlines()
        frame = pl.DataFrame(
            {"line": pl.Series(range(1, len(raw) + 1), dtype=pl.Int64), "raw": raw}
        ).with_columns(pl.col("raw").alias("text"))
        tables = sacct.find_tables(list(enumerate(raw, 1)))
        events = sacct.parse_tables(frame, tables)
        return conform_raw(events) if events is not None else empty_raw()


parser = SlurmParser()
