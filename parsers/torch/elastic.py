"""torchrun / torch.distributed.elastic launcher lines.

(The legacy torch.distributed.launch's 'Killing subprocess' / 'Main process received
SIGTERM' floods are the slurm parser's: they follow slurmstepd's SIGTERM.)

The same messages come with three headers: the logging default
(``WARNING:torch.distributed.elastic.multiprocessing.api:``), glog since torch
2.2 (``W0801 13:23:17.366000 140 torch/distributed/elastic/...:900] ``, no
year) and wrappers' own (``[INFO] [ft_launcher...]``); the bodies are stable,
so the patterns anchor on the bodies and read a glog stamp when there is one.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.torch.common import GLOG, glog_ts, signal_code, signal_name

from toranalyze.parser_api import conform_raw, contains_any, empty_raw

_FAILED = r"failed \(exitcode: (-?[0-9]+)\) local_rank: ([0-9]+) \(pid: ([0-9]+)\) of binary: (\S+)"
_SENDING = r"Sending process ([0-9]+) closing signal (\w+)"
# torch: 'Worker group FAILED. 3/3 attempts left'; dlrover: 'Worker group FAILED, is failure node: False,2/3 ...'
_WORKER_GROUP = (
    r"\[([\w-]+)\] Worker group (\w+)[.,](?: is failure node: \w+,)?\s*([0-9]+)/([0-9]+) attempts left;"
    r" will restart worker group"
)
_NEW_NODES = r"\[([\w-]+)\] Detected ([0-9]+) new nodes? from group_rank=([0-9]+); will restart worker group"
_DEATH = r"Received (?:Signals\.)?(\w+) death signal, shutting down workers"
_FORCED = r"Unable to shutdown process ([0-9]+) via (\w+), forcefully exiting via (\w+)"
_SUCCEEDED = r"worker group successfully finished|Local worker group finished \((?:WorkerState\.)?SUCCEEDED\)"
_SOCKET = r"\[c10d\] The client socket has (?:failed to connect|timed out)"
# The rendezvous failing: its join timed out (agents of other nodes never arrived) or the agent lost
# the C10d/etcd store that holds it. The launcher's error_handler record names the exception in its
# JSON ('    "message": "RendezvousTimeoutError: ",'); dynamic_rendezvous warns of a store it lost
# ("The node 'host_pid_0' has failed to send a keep-alive heartbeat to the rendezvous 'id' due to an
# error of type RendezvousConnectionError."). A plain traceback ending in the exception is a crash record's.
_RDZV_JSON = r'^\s*"message": "(Rendezvous(?:Timeout|Connection)Error\b[^"]*?)\s*",?\s*$'
_RDZV_KEEPALIVE = (
    r"(The node '[^']*' has failed to .*? due to an error of type Rendezvous(?:Timeout|Connection)Error)\b"
)

_RDZV = r"\[([\w-]+)\] Rendezvous complete for workers\. Result:"
_LAUNCH = "Starting elastic_operator with launch configs:"
_KV = r"^\s{2,}(\w+)\s*(?:=|:\s)\s*(.*?)\s*$"

ELASTIC_NOISE: tuple[str, ...] = (
    r"Rendezvous'ing worker group",
    r"starting workers for entrypoint",
    r"\] Starting worker group",
    r"log directory set to: ",
    r"Setting worker[0-9]+ reply file to: ",
    r"TORCHELASTIC_ENABLE_FILE_TIMER",
    r"Setting OMP_NUM_THREADS environment variable for each process",
    r"^\*{20,}\s*$",
    r"^WARNING:torch\.distributed\.run:\s*$",
    r"Stopping worker group",
    r"attempts to join the next round of the rendezvous",
    r"has joined round [0-9]+ of the rendezvous",
    r"Done waiting for other agents",
    r"Waiting [0-9]+ seconds for other agents to finish",
)


def _fmt(template: str, *args: pl.Expr) -> pl.Expr:
    """pl.format that never yields null (a cut-off block still gets a message)."""
    return pl.format(template, *[a.cast(pl.String).fill_null("?") for a in args])


def _g(n: int) -> pl.Expr:
    """Capture group n of the pattern the current one-line rule matched (see _matching)."""
    return pl.col("_g").struct.field(str(n))


def _lit(fragment: str) -> pl.Expr:
    return pl.col("_x").str.contains(fragment, literal=True)


def _stamp() -> list[pl.Expr]:
    """ts from a glog header (year unknown); other headers leave ts to the reader's prefix context."""
    is_glog = pl.col("_x").str.contains(GLOG)
    return [glog_ts(pl.col("_x")).alias("ts"), pl.when(is_glog).then(False).otherwise(True).alias("ts_year_known")]


def _matching(lf: pl.LazyFrame, fragment: str, pattern: str) -> pl.LazyFrame:
    """Rows containing the literal fragment (cheap) whose text matches pattern; groups in _g."""
    hits = lf.filter(_lit(fragment)).with_columns(pl.col("_x").str.extract_groups(pattern).alias("_g"))
    return hits.filter(pl.col("_x").str.contains(pattern))


def _failed(lf: pl.LazyFrame) -> pl.LazyFrame:
    sig = signal_name(_g(1))
    message = pl.concat_str(
        [
            _fmt("worker failed (exitcode: {}", _g(1)),
            pl.when(sig.is_not_null()).then(_fmt(" = {}", sig)),
            _fmt(") local_rank: {} (pid: {}) of binary: {}", _g(2), _g(3), _g(4)),
        ],
        ignore_nulls=True,
    )
    return _matching(lf, "failed (exitcode:", _FAILED).select(
        "line",
        *_stamp(),
        pl.lit("error").alias("kind"),
        pl.lit("error").alias("severity"),
        _g(1).alias("code"),
        _g(2).cast(pl.Int32, strict=False).alias("rank"),  # local rank: the line names no other
        message.alias("message"),
    )


def _restarts(lf: pl.LazyFrame) -> pl.LazyFrame:
    group = _matching(lf, "will restart worker group", _WORKER_GROUP)
    left, most = _g(3).cast(pl.Int32, strict=False), _g(4).cast(pl.Int32, strict=False)
    failed = group.select(
        "line",
        *_stamp(),
        # The restart this line announces: '3/3 attempts left' -> the first (restart_count=1 after it).
        (most - left + 1).alias("attempt"),
        _g(2).alias("state"),
        _fmt("[{}] worker group {}; restarting ({}/{} restarts left before this one)", _g(1), _g(2), left, most)
        .alias("message"),
    )
    joined = _matching(lf, "will restart worker group", _NEW_NODES).select(
        "line",
        *_stamp(),
        _fmt("[{}] {} new node(s) from group_rank={}; restarting worker group", _g(1), _g(2), _g(3)).alias("message"),
    )
    kind = [pl.lit("restart").alias("kind"), pl.lit("warning").alias("severity")]
    return pl.concat([conform_raw(f.with_columns(kind)) for f in (failed, joined)], how="vertical")


def _simple(lf: pl.LazyFrame, fragment: str, pattern: str, kind: str, message: pl.Expr,
            code: pl.Expr | None = None) -> pl.LazyFrame:
    return _matching(lf, fragment, pattern).select(
        "line",
        *_stamp(),
        pl.lit(kind).alias("kind"),
        pl.lit(kind).alias("severity"),
        (code if code is not None else pl.lit(None, pl.String)).alias("code"),
        message.alias("message"),
    )


def _one_liners(lf: pl.LazyFrame) -> list[pl.LazyFrame]:
    body = pl.col("_x").str.replace(GLOG, "").str.strip_chars()
    return [
        _failed(lf),
        _restarts(lf),
        _simple(lf, "closing signal", _SENDING, "warning",
                _fmt("launcher sending process {} closing signal {}", _g(1), _g(2)), signal_code(_g(2))),
        _simple(lf, "death signal", _DEATH, "warning",
                _fmt("launcher received {} death signal, shutting down workers", _g(1)), signal_code(_g(1))),
        _simple(lf, "forcefully exiting", _FORCED, "warning",
                _fmt("process {} ignored {}; killed with {}", _g(1), _g(2), _g(3))),
        _simple(lf, "finished", _SUCCEEDED, "info", body),
        _simple(lf, "[c10d] The client socket", _SOCKET, "warning", body),
        # Warnings: the rendezvous names no cause (a dead or absent peer, the network, the store's host),
        # so an error of the interruption explains it first (the rules' torch-rendezvous-*).
        _simple(lf, '"message": "Rendezvous', _RDZV_JSON, "warning",
                _fmt("rendezvous failed: {}", _g(1).str.strip_chars_end(": "))),
        _simple(lf, "due to an error of type Rendezvous", _RDZV_KEEPALIVE, "warning", _g(1)),
    ]


def _block_lines(typed: pl.LazyFrame) -> pl.LazyFrame:
    """The lines that may belong to a block, marked header (_hdr) or key line (_kv) and numbered
    by block within their stream (_blk): a key line continues the block of the line before it."""
    # Only headers and indented lines can be part of a block; a key line whose previous line in
    # its stream is anything else starts no block, so the others are dropped before the regexes.
    maybe = contains_any(pl.col("_x"), ["Rendezvous complete", _LAUNCH]) | pl.col("_x").str.contains(r"^\s\s")
    lf = (
        typed.with_columns(maybe.alias("_maybe"))
        .with_columns((~pl.col("_maybe")).shift(1).over("_s").fill_null(False).alias("_gap"))
        .filter("_maybe")
        .drop("_maybe")
    )
    is_hdr = pl.col("_x").str.contains(_RDZV) | _lit(_LAUNCH)
    lf = lf.with_columns(is_hdr.alias("_hdr"), pl.col("_x").str.contains(_KV).alias("_kv"))
    prev = (pl.col("_hdr") | pl.col("_kv")).shift(1).over("_s").fill_null(False)
    link = pl.col("_kv") & ~pl.col("_gap") & prev
    return lf.with_columns((~link).cum_sum().over("_s").alias("_blk"))


def _block_fields(lf: pl.LazyFrame) -> pl.LazyFrame:
    """One row per block opened by a header: its lines, header and the values of its keys."""
    grp = ["_s", "_blk"]
    rows = lf.filter(pl.col("_hdr").first().over(grp))
    kv = pl.col("_x").str.extract_groups(_KV)
    rows = rows.with_columns(
        pl.when(pl.col("_kv") & ~pl.col("_hdr")).then(kv.struct.field("1")).alias("_k"),
        kv.struct.field("2").alias("_v"),
    )

    def val(key: str) -> pl.Expr:
        return pl.col("_v").filter(pl.col("_k") == key).first().alias(key)

    keys = ["restart_count", "group_rank", "group_world_size", "global_world_sizes", "entrypoint",
            "min_nodes", "max_nodes", "nproc_per_node", "max_restarts"]
    return rows.group_by(grp, maintain_order=True).agg(
        pl.col("line").first(),
        pl.col("line").last().alias("line_end"),
        pl.col("_x").first(),
        *[val(k) for k in keys],
    )


def _block_message(rdzv: pl.Expr, world: pl.Expr, nproc: pl.Expr) -> pl.Expr:
    """A rendezvous result (``rdzv`` its header's name) or a launch config, on one line."""
    rdzv_msg = _fmt(
        "[{}] rendezvous complete: restart_count={} group_rank={} group_world_size={} world_size={}",
        rdzv, pl.col("restart_count"), pl.col("group_rank"), pl.col("group_world_size"), world,
    )
    launch_msg = _fmt(
        "torchrun launch: entrypoint={} nodes={}:{} nproc_per_node={} max_restarts={}",
        pl.col("entrypoint"), pl.col("min_nodes"), pl.col("max_nodes"), nproc, pl.col("max_restarts"),
    )
    return pl.when(rdzv.is_not_null()).then(rdzv_msg).otherwise(launch_msg)


def _blocks(typed: pl.LazyFrame) -> pl.LazyFrame:
    """'Rendezvous complete ... Result:' and 'Starting elastic_operator ...' with their indented key lines."""
    blocks = _block_fields(_block_lines(typed))
    rdzv = pl.col("_x").str.extract(_RDZV, 1)
    is_rdzv = rdzv.is_not_null()
    world = pl.col("global_world_sizes").str.extract(r"^\[([0-9]+)", 1).cast(pl.Int32, strict=False)
    # A launch config states the job size only when it is not elastic (min_nodes == max_nodes).
    nodes = pl.when(pl.col("min_nodes") == pl.col("max_nodes")).then(pl.col("max_nodes").cast(pl.Int32, strict=False))
    nproc = pl.col("nproc_per_node").cast(pl.Int32, strict=False)
    return blocks.select(
        "line",
        pl.when(pl.col("line_end") > pl.col("line")).then(pl.col("line_end")).alias("line_end"),
        *_stamp(),
        # A torchrun launch always starts a new attempt of the training processes (a marker for
        # attempts); the rendezvous result is context with the restart count.
        pl.when(is_rdzv).then(pl.lit("info")).otherwise(pl.lit("init")).alias("kind"),
        pl.lit("info").alias("severity"),
        pl.when(is_rdzv).then(pl.col("restart_count").cast(pl.Int32, strict=False)).alias("attempt"),
        pl.when(is_rdzv).then(pl.col("group_world_size").cast(pl.Int32, strict=False)).otherwise(nodes)
        .alias("n_nodes"),
        pl.when(is_rdzv).then(world).otherwise(nodes * nproc).alias("n_gpus"),
        _block_message(rdzv, world, nproc).alias("message"),
    )


_FRAGMENTS = [
    "failed (exitcode:", "will restart worker group", "closing signal", "death signal", "forcefully exiting",
    "finished", "[c10d] The client socket", '"message": "Rendezvous', "due to an error of type Rendezvous",
]


def elastic_events(typed: pl.DataFrame) -> pl.LazyFrame:
    # Lines inside a crash record (the ChildFailedError block) are that record's. Blocks need
    # every row: they link a line to the one before it in the stream. The one-line rules each
    # filter on a literal of _FRAGMENTS: one pass over every line finds the few that hold any.
    rows = typed.filter(~pl.col("_rec") & contains_any(pl.col("_x"), _FRAGMENTS))
    one_liners = _one_liners(rows.lazy()) if rows.height else []  # none: not planned at all
    # A block needs a header line: without one, blocks are not planned either.
    headed = typed.select(contains_any(pl.col("_x"), ["Rendezvous complete", _LAUNCH]).any()).item()
    blocks = [_blocks(typed.lazy())] if headed else []
    if not one_liners and not blocks:
        return empty_raw()
    return pl.concat([conform_raw(f) for f in [*one_liners, *blocks]], how="vertical")
