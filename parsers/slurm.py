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
from toranalyze.reader import read_head
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
        head = read_head(path).decode("utf-8", errors="replace")
        if not sacct.sniff(head):
            return super().parse(path)  # forced onto a text log: the line rules apply
        events = sacct.parse_document(path)
        return conform_raw(events) if events is not None else empty_raw()


parser = SlurmParser()
