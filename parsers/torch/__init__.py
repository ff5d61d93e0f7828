"""torch parser: runtime failures of PyTorch training processes and their launchers.

Recognises
* multi-line crash records (``_torch_records``): Python tracebacks with chained
  exceptions, C++ aborts (``terminate called after throwing ...`` / ``what():`` /
  ``frame #N``), faulthandler dumps, the torchrun ``ChildFailedError`` block;
* torchrun / torch.distributed.elastic launcher lines (``_torch_elastic``):
  ``failed (exitcode: N)`` errors, worker-group ``restart`` rows, the launch config
  (``init``: a new attempt of the training processes), rendezvous results (``info``
  with the restart count), signals;
* one-line failures outside those records (``_torch_lines``): shell signal
  deaths, DataLoader worker bus errors, CUDA error lines (and their ROCm, TPU,
  TensorFlow and XLA counterparts), NaN-loss aborts, mpirun's lost remote daemon.

NCCL_DEBUG lines, ``NCCL error in:`` lines and ProcessGroupNCCL watchdog lines
belong to the nccl parser; a traceback that ends in an NCCL exception is still a
record here. Classification lives in ``toranalyze/rules/torch.toml``.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.torch.common import SIGNAL_WORDS
from toranalyze_parsers.torch.elastic import ELASTIC_NOISE, elastic_events
from toranalyze_parsers.torch.flight import dump_rows, is_dump
from toranalyze_parsers.torch.lines import LINE_NOISE, line_events
from toranalyze_parsers.torch.records import records, typed_lines

from toranalyze.parser_api import Parser, literal_gate


class TorchParser(Parser):
    name = "torch"
    source = "trainer"
    noise = ELASTIC_NOISE + LINE_NOISE
    # Records need an anchor line (traceback, exception name, terminate/what(), fatal error, root
    # cause) or a frame; elastic and one-line rules start from the literals they filter on.
    gates = (
        literal_gate([
            "Traceback", "During handling of the above exception", "The above exception was the direct cause",
            "Error", "Exception", "Interrupt", "Exit", "terminate called", "what()", "Fatal Python error",
            "Root Cause", 'File "', "failed (exitcode:", "will restart worker group", "closing signal",
            "death signal", "forcefully exiting", "finished", "[c10d] The client socket", "Rendezvous complete",
            "Starting elastic_operator", "ERROR: Unexpected", "CUDA error: ", "CUDA driver error",
            "CUDA out of memory", "cudaError", "CUBLAS_STATUS_", "CUDNN_STATUS_", "device-side assert triggered",
            "uncorrectable ECC error", "GPU is lost", "[Errno ", "esource exhausted", "ESOURCE_EXHAUSTED",
            "found in input tensor", "Stale file handle", "Input/output error", "No space left on device",
            "Disk quota exceeded", "Read-only file system", "heartbeat timeout", "Caught signal ",
            "CUDA_ERROR_OUT_OF_MEMORY", "HIP_ERROR_OutOfMemory", "hipErrorOutOfMemory", "Memory access fault by GPU",
            "Core halted unexpectedly", "Remote daemon", *SIGNAL_WORDS,
        ]),
        r"(?i:loss)",
    )
    batched = True  # records and launcher blocks link lines of one writer stream of one file

    def sniff_bytes(self, head: bytes) -> bool:
        """A Flight Recorder dump (a pickle of plain data; flight.py)."""
        return is_dump(head)

    def parse(self, path: str) -> pl.LazyFrame:
        with open(path, "rb") as fh:
            head = fh.read(4096)
        return dump_rows(path) if is_dump(head) else super().parse(path)

    def extract(self, lines: pl.LazyFrame) -> pl.LazyFrame:
        # Three extractors read the typed lines, materialised once (each lazy branch would
        # derive the windows again); records read only the lines of kept records.
        typed, recs = typed_lines(lines)
        # No record lines (most blocks): the record summary is not planned at all.
        found = [records(recs.lazy())] if recs.height else []
        return pl.concat([*found, elastic_events(typed), line_events(typed.lazy())], how="vertical")


parser = TorchParser()

__all__ = ["TorchParser", "parser"]  # the entry point names `parser`
