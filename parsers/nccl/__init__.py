"""nccl parser: NCCL_DEBUG output and the PyTorch ProcessGroupNCCL watchdog.

Recognised records (message catalogue in ``patterns``):

* NCCL_DEBUG lines ``host:pid:tid [cudaDev] [file:N ]NCCL INFO|WARN …``: ``Init COMPLETE``
  and ``nRanks/nNodes`` comm lines become ``info`` (rank, world size, GPU, PCI bus id);
  ``Abort COMPLETE`` a ``warning``; WARN lines (IB completion errors, socket failures,
  ``Cuda failure``, proxy errors …) ``error`` or ``warning``. INFO chatter, including the
  ``file.cc:N -> 6`` return-code traces, is noise.
* PyTorch NCCL errors: ``NCCL error in: …ProcessGroupNCCL.cpp:N, unhandled system error,
  NCCL version X`` with its ``ncclXxxError: …`` / ``Last error:`` lines as one record.
* Watchdog generations: ``[Rank N] (Watchdog c|C)aught collective operation timeout:
  WorkNCCL(…)`` with or without SeqNum/Numel fields, glog stamps and PG tags; ``failure /
  exception / timeout detected by watchdog``; heartbeat monitor; ``watchdog got stuck``;
  ``taking the entire process down``; desync reports; flight-recorder stacks and dumps.

``node`` is the NCCL host, ``gpu`` the CUDA device in ``[N]``; ranks come from the
``[rankN]:`` prefix first (global), then the PG tag. A glog stamp (no year) is used only
when the collector put no stamp of its own in front of the line, so one file keeps one clock.
``what():`` lines and ``terminate called`` belong to the torch parser and are skipped.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.nccl import fields, records
from toranalyze_parsers.nccl.patterns import ANCHORS, NOISE

from toranalyze.parser_api import Parser, conform_raw, literal_gate


class NcclParser(Parser):
    name = "nccl"
    source = "nccl"
    noise = NOISE
    # records.prefilter keeps only anchor lines, their continuations and '#N' frames
    gates = (literal_gate(ANCHORS, ignore_case=True), r"^\s*#")
    # Batched: every link between lines (wraps, chains, a writer's previous line) also requires the
    # lines to be at most STREAM_GAP apart, and the files of a batch are FILE_LINES apart.
    batched = True

    def extract(self, lines: pl.LazyFrame) -> pl.LazyFrame:
        candidates = records.prefilter(lines)
        heads = records.tag_and_group(candidates)
        return conform_raw(fields.events(heads))


parser = NcclParser()

__all__ = ["NcclParser", "parser"]  # the entry point names `parser`
