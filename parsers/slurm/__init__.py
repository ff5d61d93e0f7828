"""Slurm: job stdout/stderr records, slurmctld/slurmd logs, squeue watchdogs, and sacct tables.

Text logs go through ``extract`` (line rules in ``_slurm_lines``; sacct tables an
epilog printed into the log are read too). A file that *is* a sacct table is
claimed by ``sniff`` and read whole by ``parse``.

Parsers do not classify: ``toranalyze/rules/slurm.toml`` maps states and
messages to failure classes.

What the rows look like:

* ``job_id`` is the job without its step: ``123.batch`` -> ``123``, array tasks
  stay ``123_4``, a pending array ``123_[1-3%1]`` is ``123``; the step stays
  visible in ``message``.
* sacct rows: one ``job_submit`` (jobs only), ``job_start`` and ``job_end`` per
  table row, steps included. ``state`` is PENDING / RUNNING on the first two and
  the final state on the end row ('CANCELLED by 12' -> CANCELLED, cut cells
  resolved); ``code`` the exit code, ``duration_s`` the elapsed time, ``attempt``
  the Restarts column. ``message`` is ``JobID=<id> Name=value ...``; a step's name
  is written ``StepName=`` so ``JobName=`` always names the job.
* slurmstepd banners are ``job_end`` rows whose ``ts`` is the AT time and whose
  ``node`` is the host slurmstepd ran on (not necessarily the failed one: the
  ``srun: error: Node failure on X`` row names that one).
* Watchdog lines: ``PULSE: ... is running`` is a ``heartbeat``; pending jobs are
  ``info`` rows with state PENDING; ``ALERT: ... not RUNNING or SCHEDULED`` a warning.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.slurm import sacct as sacct
from toranalyze_parsers.slurm.lines import KEYWORDS, NOISE, extract_slurm_lines

from toranalyze.parser_api import Parser, conform_raw, empty_raw, literal_gate, read_head


class SlurmParser(Parser):
    name = "slurm"
    source = "slurm"
    noise = NOISE
    # line rules read only KEYWORDS lines; embedded sacct tables start at a JobID header
    gates = (literal_gate(KEYWORDS), r"(?i:\bJobID)")
    batched = True  # rules read one line each; bursts and embedded tables end with their file

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

__all__ = ["SlurmParser", "parser"]  # the entry point names `parser`
