"""One-line runtime failures that are not part of a crash record.

Rows inside a kept record (``_rec``) are skipped: the record already carries
their text, and one failure should be one event.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.torch.common import signal_of_words
from toranalyze_parsers.torch.records import NCCL_OWNED, SIGLINE

from toranalyze.parser_api import conform_raw, contains_any, empty_raw

# torch's DataLoader worker signal handler, printed by each dying worker.
_WORKER_SIGNAL = r"^ERROR: Unexpected (bus error|segmentation fault|floating-point exception) encountered in worker"
_WORKER_CODES = {"bus error": "-7", "segmentation fault": "-11", "floating-point exception": "-8"}
_CUDA = (
    r"CUDA error: |CUDA driver error|CUDA out of memory|cudaError[A-Z]\w+|CUBLAS_STATUS_[A-Z_]+|CUDNN_STATUS_[A-Z_]+"
    r"|device-side assert triggered|uncorrectable ECC error|GPU is lost"
    # TensorFlow and XLA (JAX) name an accelerator OOM by their status code: 'Resource exhausted: OOM
    # when allocating tensor ...', 'RESOURCE_EXHAUSTED: Out of memory while trying to allocate ...'
    # (a quota or message-size RESOURCE_EXHAUSTED is not one).
    r"|(?i)\bresource[ _]exhausted:\s+(?:OOM\b|Out\b)"
    # The driver API's status, as TensorFlow's and XLA's stream executors print it after a failed
    # device allocation, for CUDA and for ROCm (HIP): '... failed to allocate 890.06M (933298432
    # bytes) from device: CUDA_ERROR_OUT_OF_MEMORY' / '... HIP_ERROR_OutOfMemory'.
    r"|CUDA_ERROR_OUT_OF_MEMORY|HIP_ERROR_OutOfMemory|hipErrorOutOfMemory"
    # ROCm's runtime (HSA) on a GPU page fault, the analogue of CUDA's illegal memory access:
    # 'Memory access fault by GPU node-2 (Agent handle: 0x...) on address 0x.... Reason: Page not present
    # or supervisor privilege.'
    r"|Memory access fault by GPU node-[0-9]+"
    # A TPU core stopped on an on-device check (TensorFlow's TPU runtime, PJRT): 'Core halted
    # unexpectedly: ... Accelerator device halted prematurely, perhaps due to an on-device check-failure'.
    r"|Core halted unexpectedly"
)
# Not ours: NCCL's own lines name CUDA failures too ('NCCL WARN Cuda failure ...').
_NOT_CUDA = NCCL_OWNED + r"|NCCL (?:WARN|INFO)|Cuda failure"
_NAN = (
    r"(?i)\bloss(?:es)? (?:is|are|was|became|has become) (?:nan|inf)\b"
    r"|(?i)\b(?:nan|inf)(?:/(?:nan|inf))? (?:in )?loss(?:es)?(?: value)? (?:detected|encountered)"
    r"|(?i)\bloss (?:contains|contained) (?:nan|inf)"
    # TensorFlow's NanTensorHook ('Model diverged with loss = NaN.'); Megatron's grad-norm check
    # ('found NaN in local grad norm in backwards pass').
    r"|(?i)\bdiverged with loss\s*=\s*(?:nan|inf)\b|(?i)\bfound (?:nan|inf) in (?:local )?grad(?:ient)? norm"
    # fairseq's NaN check through tensorboardX: 'NaN or Inf found in input tensor.'
    r"|(?i)\bnan or inf found in input tensor"
)

# A storage errno in a line a logger wrote, not a traceback: 'ERROR: megatron.core.dist_checkpointing
# .strategies.filesystem_async: Local process 0 encountered an error: [Errno 5] Input/output error'.
_ERRNO = r"\[Errno (?:5|28|30|116|122)\]"
# The same errnos as strerror(3) prints them after the path a tool failed on, ending its line:
# 'fatal error: ../kernel_includes.hpp: Stale file handle', '-bash: cd: /home/u: Stale file handle'.
_STRERROR = (
    r": (?:Stale file handle|Input/output error|No space left on device|Disk quota exceeded"
    r"|Read-only file system)\s*$"
)

# The JAX / TensorFlow coordination service (task 0) on a task that stopped heartbeating: '/job:jax_worker/
# replica:0/task:37 has been set to ERROR in coordination service: UNAVAILABLE: Task /job:jax_worker/replica:0/
# task:37 heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed ...'.
# A peer's silence whose cause the line does not know: a warning, so any error explains it first.
_HEARTBEAT = r"\bTask /job:[\w.-]+/replica:[0-9]+/task:[0-9]+ heartbeat timeout\b"

# UCX's error handler on a fatal signal in the process (SIGSEGV, SIGBUS, SIGILL, SIGFPE), under its log head
# '[host:pid:thread:tid]' (the pid space-padded): '[09677202c889:5283 :0:5704] Caught signal 7 (Bus error:
# nonexistent physical address)'. The head names the node; the message is the line after it.
_UCX_SIGNAL = r"^\[(?P<host>[\w.\-]+):[0-9]+ *:[0-9]+:[0-9]+\] (?P<msg>Caught signal (?P<sig>[0-9]+) \(.*)$"

# Open MPI's launcher (mpirun's HNP) on an orted it stopped hearing from, after 'ORTE has lost communication with a
# remote daemon.' (PRRTE: 'PRTE has ...'): '  Remote daemon: [[43015,0],20] on node tf-bert-...-worker-19'. The daemon's
# node died, or the network to it, or the daemon itself (Open MPI's words); like a scheduler's 'not responding', a
# warning of that node: an error of the interruption (the OOM kill, the crash) explains it first.
_MPI_DAEMON = r"^\s*Remote daemon\s*:\s*\[\[[0-9]+,[0-9]+\],[0-9]+\] on node (?P<host>[\w.\-]+)\s*$"

LINE_NOISE: tuple[str, ...] = (
    # one line per GPU thread after a device-side assert; the RuntimeError that follows is the record
    r"block: \[[0-9]+,[0-9]+,[0-9]+\], thread: \[[0-9]+,[0-9]+,[0-9]+\] Assertion .* failed\.",
)


def _events(
    lf: pl.LazyFrame,
    cond: pl.Expr,
    code: pl.Expr,
    kind: pl.Expr | None = None,
    node: pl.Expr | None = None,
    message: pl.Expr | None = None,
) -> pl.LazyFrame:
    """Rows matching cond as one-line events; severity follows the kind (error / warning). The
    message is the line unless given; the node is null unless given."""
    kind = pl.lit("error") if kind is None else kind
    return conform_raw(
        lf.filter(cond).select(
            "line",
            kind.alias("kind"),
            kind.alias("severity"),
            code.alias("code"),
            (pl.lit(None, pl.String) if node is None else node).alias("node"),
            (pl.col("_x").str.strip_chars() if message is None else message).alias("message"),
        )
    )


# Literals the worker and CUDA rules need; with the NaN rule's own pattern (a looser 'loss' test
# would keep every iteration record of a trainer log) one pass finds the rows any rule can use.
_NEEDS = ["ERROR: Unexpected", "CUDA error: ", "CUDA driver error", "CUDA out of memory", "cudaError", "CUBLAS_STATUS_",
          "CUDNN_STATUS_", "device-side assert triggered", "uncorrectable ECC error", "GPU is lost", "[Errno ",
          "esource exhausted", "ESOURCE_EXHAUSTED", "found in input tensor", "Stale file handle",
          "Input/output error", "No space left on device", "Disk quota exceeded", "Read-only file system",
          "heartbeat timeout", "Caught signal ", "CUDA_ERROR_OUT_OF_MEMORY", "HIP_ERROR_OutOfMemory",
          "hipErrorOutOfMemory", "Memory access fault by GPU", "Core halted unexpectedly", "Remote daemon"]


def line_events(typed: pl.LazyFrame) -> pl.LazyFrame:
    text = pl.col("_x")
    maybe = (pl.col("_t") == SIGLINE) | contains_any(text, _NEEDS) | text.str.contains(_NAN)
    rows = typed.filter(~pl.col("_rec") & maybe).collect()
    if rows.height == 0:  # most blocks: the rules below are not planned
        return empty_raw()
    lf = rows.lazy()
    worker = text.str.extract(_WORKER_SIGNAL, 1)
    signal_line = pl.col("_t") == SIGLINE
    cuda = text.str.contains(_CUDA) & ~text.str.contains(_NOT_CUDA) & ~signal_line & worker.is_null()
    nan = text.str.contains(r"(?i)nan|inf") & text.str.contains(_NAN) & ~cuda
    errno = (text.str.contains(_ERRNO) | text.str.contains(_STRERROR)) & ~cuda & ~nan & ~signal_line & worker.is_null()
    heartbeat = text.str.contains(_HEARTBEAT) & ~cuda & ~nan & ~errno & ~signal_line & worker.is_null()
    ucx = text.str.extract_groups(_UCX_SIGNAL)
    daemon = text.str.extract(_MPI_DAEMON, 1)
    no_code, error, warning = pl.lit(None, pl.String), pl.lit("error"), pl.lit("warning")
    return pl.concat(
        [
            _events(lf, worker.is_not_null(), worker.replace_strict(_WORKER_CODES, default=None)),
            _events(lf, signal_line, signal_of_words(text)),
            _events(lf, cuda, no_code),
            # 'loss is nan, skipping batch' is a trainer coping, not a crash
            _events(lf, nan, no_code, pl.when(text.str.contains(r"(?i)\bskip")).then(warning).otherwise(error)),
            _events(lf, errno, no_code),
            _events(lf, heartbeat, no_code, warning),
            _events(lf, daemon.is_not_null(), no_code, warning, node=daemon,
                    message=pl.format("mpirun lost communication with a remote daemon on node {}", daemon)),
            _events(lf, ucx.struct.field("sig").is_not_null(), "-" + ucx.struct.field("sig"),
                    node=ucx.struct.field("host"), message=ucx.struct.field("msg")),
        ],
        how="vertical",
    )
