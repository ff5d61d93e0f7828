"""Regexes and literal anchors of the nccl parser (NCCL_DEBUG output, PyTorch ProcessGroupNCCL).

Kept apart from the extraction logic so the message catalogue can be read (and extended)
in one place. Everything anchors on fragments that have stayed stable across NCCL 2.4-2.28
and PyTorch 1.8-2.7; fields that moved between versions get tolerant sub-patterns.
"""

from __future__ import annotations

# Cheap case-insensitive prefilter: a line without any of these cannot start a record.
ANCHORS: list[str] = [
    "nccl",
    "watchdog",
    "collective",
    "last error",
    "heartbeat monitor",
    "entire process down",
    "dump signal",
    "lagging",
    "net/ib",
    "net/ofi",
    "retry count",
]

# `host:pid:tid [cudaDev] [file.cc:N ]NCCL LEVEL message` (mpirun --tag-output prefix tolerated).
# Pasted and collected lines lose parts of the head: the host alone (`host [5] ...`, some
# collectors), no head at all (`NCCL WARN NET/IB : ...` quoted in a thread), or, before NCCL 2.4,
# no `NCCL` word after the source file (`transport/net_ib.cu:781 WARN NET/IB : ...`), or a space
# instead of the colon before the source line (2.3's `include/socket.h 398 NCCL WARN ...`). Net plugins
# name a function instead of a file (`create_nccl_ofi_component:459 NCCL WARN NET/OFI ...`).
# Shared logs redact the pid (`host-01:XXXXXX [5] ...`), sometimes with the tid gone too. A line
# quoted inline in a post opens with a few words and a backtick (``error log `host:1:2 [1] ...``).
# A multi-node launcher (pdsh under DeepSpeed) puts the target's name before the head
# (``node01: host:1:2 [0] ...``), and a reply quoting a log keeps its ``> `` marks. A host
# redacted to a placeholder (``<cluster_name>:922:1158 [3] ...``) keeps the head; it names no node.
NCCL_LINE = (
    r"^(?:>\s?)?(?:[^`]{0,40}`)?(?:\[[0-9]+,[0-9]+\]<std(?:out|err)>:\s*)?"
    r"(?:(?:[\w.\-]+: )?(?P<host><[\w.\-]+>|[\w.\-]+?)"
    r"(?::(?P<pid>[0-9]+|[Xx*]+)(?::(?P<tid>[0-9]+|[Xx*]+))?)? \[(?P<dev>[0-9]+)\] )?"
    r"(?:(?P<src>\S+\.(?:cc|cu|c|h|cpp))[: ](?P<srcline>[0-9]+) (?:NCCL )?|(?:\w+:[0-9]+ )?NCCL )"
    r"(?P<level>INFO|WARN|TRACE|ERROR)\b ?(?P<msg>.*)$"
)

# PyTorch c10 / glog header: `[E ProcessGroupNCCL.cpp:737] `, `[E606 09:09:08.164985384 ProcessGroupNCCL.cpp:757] `,
# glog proper `E1206 18:44:12.715298 1234 ProcessGroupNCCL.cpp:1234] ` (month not zero-padded in c10's own logger).
GLOG_HEAD = (
    r"^\[?(?P<lvl>[IWEF])(?:(?P<mmdd>[0-9]{3,4}) (?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?)(?: +[0-9]+)?)? ?"
    r"(?P<src>[\w./\-]+\.(?:cpp|cc|hpp|h|py)):(?P<srcline>[0-9]+)\]\s*"
)

# `[Rank 1]`, `[PG 1 Rank 0]`, `[PG ID 0 PG GUID 0(default_pg) Rank 1]`, `[PG 0 (default_pg) Rank 12]`.
PG_RANK = r"\[(?:PG [^\]]*?)?Rank ([0-9]+)\]"

# Lines that begin a record of their own: never glued onto a hard-wrapped line above them.
RECORD_START = (
    r"^(?:\s*\[|[\w.\-]+:[0-9]+:[0-9]+ \[[0-9]+\]|[IWEF][0-9]{3,4} [0-9]|Traceback"
    r"|\s*File \"|\s*what\(\)|terminate called"
    r"|Exception raised|frame #|\s*nccl\w+:|\s*Last error:|\s*- |#[0-9]+ |\S+Error\b|\S+Exception\b)"
)

# NCCL result codes (ncclResult_t) and the texts PyTorch / ncclGetErrorString print for them.
NCCL_RESULTS: list[tuple[str, str, int]] = [
    # (enum name, ncclGetErrorString text, number)
    ("ncclUnhandledCudaError", "unhandled cuda error", 1),
    ("ncclSystemError", "unhandled system error", 2),
    ("ncclInternalError", "internal error", 3),
    ("ncclInvalidArgument", "invalid argument", 4),
    ("ncclInvalidUsage", "invalid usage", 5),
    ("ncclRemoteError", "remote process exited or there was a network error", 6),
    ("ncclInProgress", "NCCL operation in progress", 7),
]
_ENUMS = "|".join(name for name, _, _ in NCCL_RESULTS)

# `ncclSystemError: System call ... failed.` / `Last error:` follow a PyTorch NCCL error on the next lines.
DETAIL_LINE = rf"^\s*(?:[\w.]+\.)?(?:{_ENUMS}|Unknown NCCL error)\b|^\s*Last error:"
BARE_LAST_ERROR = r"^\s*Last error:\s*$"

# `NCCL error in: <file>:<line>, <text>, NCCL version X` (C10D_NCCL_CHECK) / `NCCL error: <text>, NCCL version X`.
NCCL_ERROR_IN = r"NCCL error in: |NCCL error: |NCCL Error [0-9]+: "

# Flight recorder `Stack trace of the failed collective:` frames: `#2 buggy from collective_mismatch.py:8`.
FR_FRAME = r"^\s*#[0-9]+ \S.* from \S+:[0-9]+\s*$"

# IB completion error: old `with error 12, opcode 0, len 0, vendor err 129 (Recv)`,
# 2.19+ `with status=12 opcode=129 len=65536 vendor err 129 (Recv) localGid … remoteGids… hca mlx5_0`,
# 2.28+ `with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RECV_RDMA_WITH_IMM(129) vendor_err=129 …`.
IB_STATUS = r"with (?:error|status=)\s*(?:\w+\()?([0-9]+)"
IB_DONE = r"vendor[ _]err[= ]?[0-9]+\s+\S"

# Socket failures that mean the network (or the peer's host) is unreachable, vs. a peer that went away
# or a connect that is only being retried (the cause is elsewhere: left unclassified).
SOCKET_FATAL = (
    r"(?i)connection refused|connection timed out|no route to host|network is unreachable|broken pipe"
    r"|software caused connection abort|exceeded (?:error )?retry count|socket\w*: .*\bfailed\b"
)
SOCKET_SOFT = r"(?i)\bretrying\b|closed by remote peer|reset by peer"

# Verbs transport failures printed by other RDMA libraries beside NCCL (UCX `ib_mlx5_log.c:143
# Transport retry count exceeded on mlx5_0:1/IB`, `CQE ERROR ... status=12(transport retry counter
# exceeded)`): IBV_WC_RETRY_EXC_ERR, the same fabric fault as NCCL's status 12 completion.
RDMA_RETRY = r"(?i)transport retry count(?:er)? exceeded"
# UCX's own log head: ``[host:pid:thread:tid] ib_mlx5_log.c:143  <message>`` names the host (the pid
# may be space-padded: ``[host:5283 :0:5704]``).
UCX_HEAD = r"^\[([\w.\-]+):[0-9]+ *:[0-9]+:[0-9]+\] \w+\.c:[0-9]+ "

# Other NCCL WARN texts that mean the operation failed (proxy result, misuse, /dev/shm too small).
WARN_ERROR = r"retcode [0-9]+|Proxy Call to rank [0-9]+ failed|Duplicate GPU detected|/dev/shm"

# Desync report verdicts (TORCH_NCCL_DESYNC_DEBUG).
DESYNC_LAG = (
    r"\[[0-9, ]+\] (?:finished collective #[0-9]+, but didn't join|joined but didn't finish) collective #[0-9]+"
)
DESYNC_MISSING = r"ranks \[[0-9, ]+\] are the lagging ranks that caused this timeout"
DESYNC_RANKS = r"\[([0-9]+)(?:, [0-9]+)*\] (?:finished collective|joined but)|ranks \[([0-9]+)"

# Flight-recorder bookkeeping lines (logged at error level, but they add nothing to the timeout line).
PG_CHATTER = (
    r"preparing to dump debug info|First PG on this rank (?:to signal dumping|that detected no heartbeat)"
    r"|Stack trace of the failed collective not found"
)

# An NCCL INFO/TRACE line with its full head, and the words of the INFO lines that are records.
CHATTER = (r"^(?:\[[0-9]+,[0-9]+\]<std(?:out|err)>:\s*)?[\w.\-]+:[0-9]+:[0-9]+ \[[0-9]+\] "
           r"(?:\S+:[0-9]+ )?NCCL (?:INFO|TRACE) ")
INFO_RECORDS = ["COMPLETE", "nRanks"]

# Chatter: understood, not recorded (counts as covered).
NOISE: tuple[str, ...] = (
    # every NCCL INFO/TRACE line, including `transport/net.cc:1134 -> 6` return-code traces
    CHATTER,
    r"^NCCL version [0-9]",
    # PyTorch's info/warning lines from the NCCL process group (options, env, barrier device guesses)
    r"^\[?[IW][0-9]{0,4}(?: [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?)?(?: +[0-9]+)? ?(?:[\w./\-]*/)?"
    r"(?:ProcessGroupNCCL|NCCLUtils|TraceUtils|FlightRecorder)\.\w+:[0-9]+\]",
    # desync-report context and snapshot lines
    r"^\s*-?\s*\[[0-9]+\] Timeout at collective: ",
    r"lagging/dead/mismatched ranks that caused the desync are:",
    r"^\s*-?\s*Snapshot of ranks' latest states:",
    r"^\s*#[0-9]+ (?:started|finished) ranks:\s*$",
    r"^\s*\[[0-9, ]+\] (?:started|finished) \S+\s*$",
    # flight-recorder chatter
    PG_CHATTER,
    # C++ frames of the watchdog thread (the exception itself belongs to the torch parser)
    r"^frame #[0-9]+: c10d::ProcessGroupNCCL::",
    r"^Exception raised from \w+ at \S*ProcessGroupNCCL\.cpp:[0-9]+",
)
