"""nccl parser: NCCL_DEBUG lines, PyTorch NCCL errors and the ProcessGroupNCCL watchdog."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toranalyze_parsers.nccl import parser

from tests.conftest import DATA, assert_golden, extract_lines, parse_file
from toranalyze.ingest.classify import classify, load_rules
from toranalyze.ingest.reader import read_text_events
from toranalyze.ingest.registry import default_registry
from toranalyze.schema import KINDS, RAW_SCHEMA, SEVERITIES

REAL = DATA / "nccl" / "real"
GOLDEN = DATA / "nccl" / "golden"

IB_FILE = REAL / "mlengineering_azure_ib_not_provisioned_error12_vendor129.log"
JZ_FILE = REAL / "mlengineering_jz_broken_node_unhandled_system_error_conn_refused.log"
DESYNC_FILE = REAL / "mlengineering_desync_report_collective_mismatch_repro.log"
BLOOM_FILE = REAL / "bloom176b_cuda_unknown_error_gpu_crash.log"
MEGDS_FILE = REAL / "bigscience_megds_zero3_52b_n16_time_limit_cancel_1999616.log"

_RULES = load_rules()


def classified(frame: pl.DataFrame) -> pl.DataFrame:
    """Events of this parser with the built-in rules applied (as the pipeline does)."""
    return classify(frame.with_columns(pl.lit("nccl").alias("source")), _RULES).collect()


def one(lines: list[str]) -> dict:
    out = classified(extract_lines(parser, lines))
    assert out.height == 1, out
    return out.row(0, named=True)


def _noise(text: str) -> bool:
    return any(re.search(p, text) for p in parser.noise)


def parse_file_lines(tmp_path: Path, lines: list[str]) -> pl.DataFrame:
    """Run the parser through the reader (prefix context included) on lines written to a file."""
    path = tmp_path / "run.log"
    path.write_text("\n".join(lines) + "\n")
    return parse_file(parser, path)


# --- real logs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(REAL.glob("*.log")), ids=lambda p: p.stem)
def test_real_logs_golden(path: Path) -> None:
    assert_golden(parse_file(parser, path), GOLDEN / f"{path.stem}.json")


@pytest.mark.parametrize(
    ("path", "covered", "lines"),
    [(IB_FILE, 6, 6), (DESYNC_FILE, 8, 8), (JZ_FILE, 3, 4), (BLOOM_FILE, 3, 10), (MEGDS_FILE, 55, 159)],
    ids=lambda v: v.stem if isinstance(v, Path) else str(v),
)
def test_real_logs_coverage(path: Path, covered: int, lines: int) -> None:
    result = read_text_events(str(path), [parser])
    assert (result.covered, result.lines) == (covered, lines)


def test_ib_completion_wrapped_after_len_is_one_network_error() -> None:
    ev = classified(parse_file(parser, IB_FILE))
    assert ev.height == 1
    row = ev.row(0, named=True)
    assert (row["line"], row["line_end"]) == (2, 3)
    assert (row["kind"], row["node"], row["gpu"], row["code"]) == ("error", "node-2", 0, "12")
    assert row["message"].endswith("with error 12, opcode 0, len 0, vendor err 129 (Recv)")
    assert row["failure_class"] == "network"


def test_broken_node_system_error_and_connection_refused_are_network() -> None:
    ev = classified(parse_file(parser, JZ_FILE))
    assert ev["line"].to_list() == [2, 4]
    err, refused = ev.row(0, named=True), ev.row(1, named=True)
    assert (err["line_end"], err["code"], err["failure_class"]) == (3, "2", "network")
    assert "unhandled system error, NCCL version 2.7.8 | ncclSystemError: System call" in err["message"]
    assert (refused["node"], refused["gpu"], refused["failure_class"]) == ("r11i6n2", 1, "network")
    assert refused["message"] == "Connect to 10.148.3.247<56821> failed : Connection refused"


def test_desync_report_names_the_lagging_rank() -> None:
    ev = classified(parse_file(parser, DESYNC_FILE))
    timeout, desync, stack = ev.rows(named=True)
    assert (timeout["rank"], timeout["duration_s"], timeout["failure_class"]) == (0, 8.0, "collective_timeout")
    assert "SeqNum=2" in timeout["message"] and "ran for 8097 milliseconds" in timeout["message"]
    assert (desync["line"], desync["rank"], desync["failure_class"]) == (4, 1, "software")
    assert (stack["kind"], stack["line"], stack["line_end"]) == ("info", 5, 8)
    assert stack["message"].endswith("#4 <module> from collective_mismatch.py:18")


def test_watchdog_cuda_error_frames_are_not_duplicated() -> None:
    # The CUDA error itself is the torch parser's record; only the ProcessGroupNCCL frames are understood here.
    result = read_text_events(str(BLOOM_FILE), [parser])
    assert result.events.height == 0
    assert result.covered == 3


def test_megatron_init_complete_lines() -> None:
    ev = parse_file(parser, MEGDS_FILE)
    assert ev.height == 23
    assert set(ev["kind"]) == {"info"} and set(ev["n_gpus"]) == {4}
    assert set(ev["device"]) == {"0000:1a:00", "0000:1c:00", "0000:88:00", "0000:8a:00"}
    first = ev.row(0, named=True)
    assert (first["node"], first["rank"], first["gpu"], first["device"]) == ("r7i4n5", 2, 2, "0000:88:00")
    assert (ev["rank"] == ev["gpu"]).all()


# --- NCCL_DEBUG lines -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "rank", "n_gpus", "gpu", "device"),
    [
        ("r7i4n5:49272:49351 [2] NCCL INFO comm 0x14680c182f50 rank 2 nranks 4 cudaDev 2 busId 88000 - Init COMPLETE",
         2, 4, 2, "0000:88:00"),
        ("node7:1234:5678 [3] NCCL INFO comm 0x55d5e0c8e2c0 rank 11 nranks 16 cudaDev 3 nvmlDev 3 busId 3b000 "
         "commId 0x2d5b0ef5b8b3a1ec - Init COMPLETE", 11, 16, 3, "0000:3b:00"),
        ("n1:1:2 [0] NCCL INFO ncclCommInitRankConfig comm 0x5 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 "
         "commId 0xab - Init COMPLETE", 0, 8, 0, "0000:18:00"),
        ("n1:1:2 [1] NCCL INFO comm 0x7f rank 1 nranks 2 cudaDev 1 busId 1B000 - Init COMPLETE", 1, 2, 1, "0000:1b:00"),
        # NCCL 2.4-2.6 print no busId; 2.3 no cudaDev either
        ("n1:1:2 [1] NCCL INFO comm 0x7f4e8c001f30 rank 1 nranks 2 cudaDev 1 nvmlDev 1 - Init COMPLETE", 1, 2, 1, None),
        ("n1:1:2 [1] NCCL INFO comm 0x7f4e8c001f30 rank 3 nranks 4 - COMPLETE", 3, 4, 1, None),
        # a PCI domain other than 0 (busId 100000 = 0001:00:00.0)
        ("n1:1:2 [0] NCCL INFO comm 0x8e01d00 rank 1 nranks 2 cudaDev 0 busId 100000 - Init COMPLETE",
         1, 2, 0, "0001:00:00"),
    ],
)
def test_init_complete(line: str, rank: int, n_gpus: int, gpu: int, device: str | None) -> None:
    row = one([line])
    assert (row["kind"], row["severity"]) == ("info", "info")
    assert (row["rank"], row["n_gpus"], row["gpu"], row["device"]) == (rank, n_gpus, gpu, device)
    assert row["failure_class"] is None


def test_comm_line_states_node_count() -> None:
    row = one(["node7:1234:5678 [3] NCCL INFO comm 0x55d5e0c8e2c0 rank 11 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0"])
    assert (row["kind"], row["rank"], row["n_gpus"], row["n_nodes"], row["node"]) == ("info", 11, 16, 2, "node7")


def test_abort_complete_is_a_warning() -> None:
    row = one(["gpu-node2:2985003:2985016 [0] NCCL INFO comm 0x8e01d00 rank 1 nranks 2 cudaDev 0 busId 100000 - Abort COMPLETE"])
    assert (row["kind"], row["rank"], row["failure_class"]) == ("warning", 1, None)


@pytest.mark.parametrize(
    "line",
    [
        "node7:1234:5678 [3] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>",
        "node7:1234:5678 [3] NCCL INFO Bootstrap: Using ib0:10.1.0.7<0>",
        "node7:1234:5678 [3] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
        "node7:1234:5678 [3] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
        "node-2:5776:5898 [0] NCCL INFO NET/IB : Using [0]ibP111p0s0:1/IB [1]rdmaP1111p0s2:1/RoCE [RO]; OOB eth0:10.2.0.4<0>",
        "node-2:5776:5902 [0] NCCL INFO transport/net.cc:1134 -> 6",
        "node-2:5776:5902 [0] NCCL INFO proxy.cc:858 -> 6 [Proxy Thread]",
        "n1:1:2 [0] NCCL INFO ncclCommInitRankConfig comm 0x5 rank 0 nranks 8 cudaDev 0 busId 18000 commId 0xab - Init START",
        "r7i4n5:49270:49270 [0] NCCL INFO Launch mode Parallel",
        "NCCL version 2.18.5+cuda12.2",
        "[1,0]<stdout>:node7:1234:5690 [3] NCCL INFO Channel 00/02 :    0   1",
    ],
)
def test_info_chatter_is_noise(line: str) -> None:
    assert extract_lines(parser, [line]).height == 0
    assert _noise(line)


@pytest.mark.parametrize(
    ("line", "code", "failure_class"),
    [
        # old format (NCCL <= 2.18)
        ("node7:1:2 [3] transport/net_ib.cc:1003 NCCL WARN NET/IB : Got completion from peer 10.0.0.8<40000> with "
         "error 5, opcode 0, len 0, vendor err 249 (Recv) localGid ::ffff:10.0.0.7 remoteGid ::ffff:10.0.0.8", "5", "network"),
        # ib_plugin.c / 2.19+: status=N opcode=N len=N
        ("[2026-03-03 12:11:38] h7:185303:186751 [1] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got completion from peer "
         "10.99.91.63<51161> with status=4 opcode=32614 len=32614 vendor err 81 (Send) localGid ::ffff:10.99.92.59 "
         "remoteGids::ffff:10.99.91.63 hca mlx5_1", "4", "network"),
        ("h:1:2 [0] ib_plugin.c:1 NCCL WARN NET/IB : Got completion from peer 10.0.0.1<1> with status=12 opcode=129 "
         "len=65536 vendor err 129 (Recv) localGid ::ffff:10.0.0.2 remoteGids::ffff:10.0.0.1", "12", "network"),
        # 2.28+: symbolic status with the number in parentheses
        ("u2:319733:319761 [1] transport/net_ib/p2p.cc:648 NCCL WARN NET/IB: Got completion from peer 10.1.2.3<40554> "
         "with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RECV_RDMA_WITH_IMM(129) vendor_err=129 localGid ::ffff:1.1.2.2 "
         "remoteGids::ffff:1.1.1.4 hca mlx5_1", "12", "network"),
        ("u2:1:2 [1] transport/net_ib/p2p.cc:783 NCCL WARN NET/IB: ncclIbTest: Got CQE with error (devIndex=0, wr_id=0)",
         None, "network"),
        ("n:1:2 [3] transport/net_ib.cc:100 NCCL WARN NET/IB : Got async event : port error", None, "network"),
    ],
)
def test_ib_errors(line: str, code: str | None, failure_class: str) -> None:
    row = one([line])
    assert (row["kind"], row["severity"], row["code"], row["failure_class"]) == ("error", "error", code, failure_class)
    assert row["message"].startswith("NET/IB")


def test_new_ib_completion_wrapped_twice_is_joined() -> None:
    lines = [
        "h:1:2 [0] ib_plugin.c:1 NCCL WARN NET/IB : Got completion from peer 10.0.0.1<1> with status=12 opc",
        "ode=129 len=65536 vendor err 1",
        "29 (Recv) localGid ::ffff:10.0.0.2 remoteGids::ffff:10.0.0.1",
        "h:1:2 [0] NCCL INFO transport/net.cc:1134 -> 6",
    ]
    row = one(lines)
    assert (row["line"], row["line_end"], row["code"]) == (1, 3, "12")
    assert "vendor err 129 (Recv) localGid" in row["message"]


@pytest.mark.parametrize(
    ("line", "kind", "failure_class"),
    [
        ("r11i6n2:486514:486651 [1] include/socket.h:403 NCCL WARN Connect to 10.148.3.247<56821> failed : Connection refused",
         "error", "network"),
        ("n:1:2 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<43125> failed : Software caused "
         "connection abort", "error", "network"),
        ("n:1:2 [3] misc/socket.cc:580 NCCL WARN socketPollConnect: connect returned Connection refused, exceeded error "
         "retry count (35)", "error", "network"),
        ("[1,0]<stdout>:n:1:2 [3] misc/socket.cc:580 NCCL WARN Net : Connect to 10.0.0.9<1234> failed : No route to host",
         "error", "network"),
        ("n:1:2 [3] misc/socket.cc:538 NCCL WARN socketProgressOpt: Call to recv from 10.0.0.1<57340> failed : Connection "
         "timed out", "error", "network"),
        # a retry: no class
        ("n:1:2 [3] misc/socket.cc:564 NCCL WARN Call to connect returned Connection timed out, retrying", "warning", None),
        # a peer that went away: a network-class warning, which the incident stage keeps as a symptom
        # when a death on another node explains it (docs/root_cause.md)
        ("gpu-node2:2985003:2985024 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer "
         "gpu-node1.int<45074>", "warning", "network"),
        ("n:1:2 [3] misc/socket.cc:538 NCCL WARN socketProgressOpt: Call to recv from 10.0.0.1<57340> failed : Connection "
         "reset by peer", "warning", "network"),
    ],
)
def test_socket_errors(line: str, kind: str, failure_class: str | None) -> None:
    row = one([line])
    assert (row["kind"], row["failure_class"]) == (kind, failure_class)
    assert row["gpu"] is not None and row["node"] is not None


@pytest.mark.parametrize(
    ("message", "code", "failure_class"),
    [
        ("Cuda failure 'out of memory'", None, "oom_gpu"),
        ("Cuda failure 'unknown error'", None, "gpu_hardware"),
        ("Cuda failure 999 'unknown error'", "999", "gpu_hardware"),
        ("Cuda failure 'uncorrectable ECC error encountered'", None, "gpu_memory"),
        ("Cuda failure 'an illegal memory access was encountered'", None, "software"),
        ("Cuda failure 'unspecified launch failure'", None, "software"),
    ],
)
def test_cuda_failure(message: str, code: str | None, failure_class: str) -> None:
    row = one([f"node7:1234:5690 [3] enqueue.cc:1200 NCCL WARN {message}"])
    assert (row["kind"], row["message"], row["code"], row["failure_class"]) == ("error", message, code, failure_class)


@pytest.mark.parametrize(
    ("message", "kind", "code", "failure_class"),
    [
        ("[Proxy Service 2] Failed to execute operation Connect from rank 2, retcode 3", "error", "3", "software"),
        ("[Proxy Service 2] Failed to execute operation Connect from rank 2, retcode 6", "error", "6", "network"),
        ("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000", "error", None, "software"),
        ("Error: failed to extend /dev/shm/nccl-Abc123 to 9637892 bytes", "error", None, "software"),
        ("Failed to initialize any NET plugin", "warning", None, None),
    ],
)
def test_other_warn_lines(message: str, kind: str, code: str | None, failure_class: str | None) -> None:
    row = one([f"node7:1234:5690 [3] plugin/x.cc:1 NCCL WARN {message}"])
    assert (row["kind"], row["code"], row["failure_class"], row["message"]) == (kind, code, failure_class, message)


def test_collector_stamp_on_nccl_warn_gives_the_time(tmp_path: Path) -> None:
    ev = parse_file_lines(tmp_path, ["[2026-05-05 06:16:47] node-01:189884:189884 [3] plugin/net.cc:334 NCCL WARN Failed to initialize any NET plugin"])
    assert ev["ts"].to_list() == [datetime(2026, 5, 5, 6, 16, 47)]
    assert ev["node"].to_list() == ["node-01"]


def test_redacted_pid_keeps_the_head(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/nccl/issues/2013: the pid redacted and no tid, behind a collector stamp.
    ev = parse_file_lines(tmp_path, [
        "[2026-03-13 22:26:02] host-01.example.com:XXXXXX [5] ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp failed "
        "with 110 Connection timed out, on dev mlx_x:1, curr state INIT, next state RTR, local GID index 3",
        "node-9:xxxx:xxxx [2] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer node-3<47861>",
    ])
    assert ev["node"].to_list() == ["host-01.example.com", "node-9"]
    assert ev["message"].str.slice(0, 13).to_list() == ["Call to ibv_m", "Net : Connect"]


def test_nccl_2_3_head_with_a_space_before_the_source_line() -> None:
    # https://github.com/NVIDIA/nccl/issues/193: `include/socket.h 398`, and a socket failure without `Net : `.
    ev = classified(extract_lines(parser, [
        "worker0-0d9gnb:15:91 [3] include/socket.h 398 NCCL WARN Call to write failed : Connection reset by peer.",
        "worker0-0d9gnb:15:91 [3] transport.cu:153 NCCL WARN transport.cu:153 ->2 [Proxy thread error]",
        # a failed call that is not a socket's is no network failure (/dev/shm full; a device allocation)
        "gpu-1:123:456 [0] misc/shmutils.cc:92 NCCL WARN Call to posix_fallocate failed : No space left on device",
        "gpu-1:123:456 [0] include/alloc.h:48 NCCL WARN Call to cudaMalloc failed : out of memory",
    ]))
    assert ev["node"].to_list() == ["worker0-0d9gnb"] * 2 + ["gpu-1"] * 2
    assert ev["failure_class"].to_list() == ["network", None, None, None]


def test_head_quoted_inline_after_prose(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/nccl/issues/928: the first line of the log opens the post's sentence.
    ev = parse_file_lines(tmp_path, [
        "error log `H100-2:19989:20082 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        "fe80::966d:ae03:8b:df78%ib0<53249> with error 4, opcode 32564, len 32564, vendor err 81 (Send)",
    ])
    assert (ev["node"].to_list(), ev["code"].to_list(), ev["kind"].to_list()) == (["H100-2"], ["4"], ["error"])


def test_head_behind_a_launcher_host_and_a_reply_quote(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/nccl/issues/394: pdsh (DeepSpeed's multi-node runner) names the target
    # before the head, and the reply quoting the log keeps its `> ` marks; the node is the head's host.
    ev = classified(parse_file_lines(tmp_path, [
        "> node01: VM-0-14-centos:106:196 [0] transport/net_ib.cc:73 NCCL WARN NET/IB : Got async event : GID table change",
        "> node01:",
        "node01: VM-0-14-centos:108:593 [0] transport/net_ib.cc:816 NCCL WARN NET/IB : Got completion with error 12, "
        "opcode 0, len 32633, vendor err 129",
    ]))
    assert ev["node"].to_list() == ["VM-0-14-centos"] * 2
    assert ev["failure_class"].to_list() == ["network"] * 2


def test_ucx_head_names_the_host() -> None:
    # https://github.com/openucx/ucx/issues/5199: UCX's `[host:pid:thread:tid] file.c:line` head.
    row = one(["[master:19546:0:19546] ib_mlx5_log.c:139  Transport retry count exceeded on mlx5_0:1/IB "
               "(synd 0x15 vend 0x81 hw_synd 0/0)"])
    assert (row["node"], row["failure_class"]) == ("master", "network")


# --- PyTorch NCCL errors (multi-line chains) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "code", "failure_class"),
    [
        (["torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
          "internal error - please report this issue to the NCCL developers, NCCL version 2.19.3",
          "ncclInternalError: Internal check failed.", "Last error:", "Proxy Call to rank 0 failed (Connect)"], "3", "software"),
        (["RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, invalid usage (run with "
          "NCCL_DEBUG=WARN for details), NCCL version 2.14.3",
          "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.", "Last error:",
          "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000"], "5", "software"),
        (["RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, unhandled cuda error (run "
          "with NCCL_DEBUG=INFO for details), NCCL version 2.14.3",
          "ncclUnhandledCudaError: Call to CUDA function failed.", "Last error:", "Cuda failure 'out of memory'"], "1", "oom_gpu"),
        (["torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, remote "
          "process exited or there was a network error, NCCL version 2.19.3",
          "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
          "Last error:",
          "NET/IB : Got completion from peer 10.0.0.2<54321> with error 12, opcode 0, len 0, vendor err 129 (Recv)"], "6", "network"),
        # the WARN flattened into the same line after 'Last error:'
        (["RuntimeError: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5",
          "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely. "
          "Last error: NET/IB : Got completion from peer 10.0.0.2<54321> with status=12 opcode=0 len=0 vendor err 129 (Recv)"],
         "6", "network"),
        (["RuntimeError: NCCL Error 2: unhandled system error"], "2", "network"),
    ],
)
def test_nccl_error_chains(lines: list[str], code: str, failure_class: str) -> None:
    row = one(lines)
    assert (row["line"], row["kind"], row["code"], row["failure_class"]) == (1, "error", code, failure_class)
    assert row["line_end"] == (len(lines) if len(lines) > 1 else None)
    assert row["message"].split(" | ")[-1] == lines[-1].strip()


def test_watchdog_exception_with_nccl_error_and_what_line() -> None:
    lines = [
        "[rank1]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 1] Process group watchdog thread terminated with exception: "
        "NCCL error: remote process exited or there was a network error, NCCL version 2.20.5",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "Last error:",
        "socketProgress: Connection closed by remote peer gpu-node1.int.hpcie.labs.faculty.ie.edu<45074>",
        "Exception raised from checkForNCCLErrorsInternal at /opt/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1723 "
        "(most recent call first):",
        "frame #1: c10d::ProcessGroupNCCL::checkForNCCLErrorsInternal(std::shared_ptr<c10d::NCCLComm>&) + 0x220 (0x1 in x.so)",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG 0 Rank 1] Process group watchdog thread terminated with exception: NCCL error: remote process "
        "exited or there was a network error, NCCL version 2.20.5",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "Last error:",
        "socketProgress: Connection closed by remote peer gpu-node1.int.hpcie.labs.faculty.ie.edu<45074>",
    ]
    ev = classified(extract_lines(parser, lines))
    head, orphan = ev.rows(named=True)
    assert (head["line"], head["line_end"], head["severity"], head["rank"], head["code"]) == (1, 4, "critical", 1, "6")
    assert head["failure_class"] == "network"
    # `terminate called` and `what():` are the torch parser's; the detail after them is still recorded.
    assert (orphan["line"], orphan["line_end"], orphan["code"]) == (9, 11, "6")
    assert _noise(lines[4]) and _noise(lines[5])


def test_interleaved_ranks_keep_their_own_chains() -> None:
    lines = [
        "[rank0]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] Process group watchdog thread terminated with exception: "
        "NCCL error: remote process exited or there was a network error, NCCL version 2.18.5+cuda12.2",
        "[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Process group watchdog thread terminated with exception: "
        "NCCL error: unhandled system error, NCCL version 2.18.5+cuda12.2",
        "[rank0]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
        "[rank1]: Last error:",
        "[rank0]: Last error:",
        "[rank0]: NET/IB : Got completion from peer 10.0.0.2<40001> with error 12, opcode 0, len 0, vendor err 129 (Recv)",
        "[rank1]: socketStartConnect: Connect to 10.0.0.3<40002> failed : Connection refused",
        "[rank1]:[E606 09:09:08.170090097 ProcessGroupNCCL.cpp:801] Stack trace of the failed collective:",
        "[rank0]:[E606 09:09:08.170090097 ProcessGroupNCCL.cpp:801] Stack trace of the failed collective:",
        "[rank1]:#0 a from x.py:1",
        "[rank0]:#0 b from y.py:2",
        "[rank1]:#1 c from x.py:3",
    ]
    ev = classified(extract_lines(parser, lines))
    assert ev.select("line", "line_end", "rank", "code", "failure_class").rows() == [
        (1, 7, 0, "6", "network"), (2, 8, 1, "2", "network"), (9, 13, 1, None, None), (10, 12, 0, None, None)
    ]
    assert ev["message"][0].endswith("| Last error: | NET/IB : Got completion from peer 10.0.0.2<40001> with error 12, "
                                     "opcode 0, len 0, vendor err 129 (Recv)")
    assert ev["message"][1].endswith("| Last error: | socketStartConnect: Connect to 10.0.0.3<40002> failed : Connection refused")
    assert ev["message"][2] == "Stack trace of the failed collective: | #0 a from x.py:1 | #1 c from x.py:3"


def test_last_error_text_of_a_writer_a_few_lines_later() -> None:
    lines = [f"[rank{r}]: Last error:" for r in range(6)] + [
        f"[rank{r}]: socketProgress: Connection closed by remote peer n{r}<1>" for r in range(6)
    ]
    ev = extract_lines(parser, lines)
    assert ev.select("line", "line_end", "rank").rows() == [(r + 1, r + 7, r) for r in range(6)]
    assert ev["message"][5] == "Last error: | socketProgress: Connection closed by remote peer n5<1>"


# --- watchdog generations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "rank", "timeout_s", "ts"),
    [
        # 1.8: no SeqNum
        ("[E ProcessGroupNCCL.cpp:566] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, "
         "Timeout(ms)=1800000) ran for 1800064 milliseconds before timing out.", 3, 1800.0, None),
        ("[E ProcessGroupNCCL.cpp:566] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(OpType=BROADCAST, "
         "TensorShape=[1], Timeout(ms)=1800000) ran for 1800047 milliseconds before timing out.", 0, 1800.0, None),
        # 1.9-1.12: SeqNum
        ("[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, "
         "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1806938 milliseconds before timing out.", 1, 1800.0, None),
        # 2.2: [rankN]: prefix
        ("[rank1]:[E ProcessGroupNCCL.cpp:523] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
         "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600316 milliseconds before timing out.",
         1, 600.0, None),
        # glog proper (zero-padded month, thread id)
        ("E1206 18:44:12.715298 1234 ProcessGroupNCCL.cpp:1191] [Rank 5] Watchdog caught collective operation timeout: "
         "WorkNCCL(SeqNum=77, OpType=_ALLGATHER_BASE, NumelIn=1, NumelOut=8, Timeout(ms)=1800000) ran for 1800521 "
         "milliseconds before timing out.", 5, 1800.0, datetime(2000, 12, 6, 18, 44, 12, 715298)),
        # c10 logger: month not padded, nanoseconds
        ("[rank2]:[E606 09:09:08.164985364 ProcessGroupNCCL.cpp:757] [Rank 2] Watchdog caught collective operation "
         "timeout: WorkNCCL(SeqNum=1, OpType=ALLGATHER, NumelIn=1, NumelOut=4, Timeout(ms)=600000) ran for 600004 "
         "milliseconds before timing out.", 2, 600.0, datetime(2000, 6, 6, 9, 9, 8, 164985)),
        # 1.10-1.12 exception in the main thread
        ("RuntimeError: NCCL communicator was aborted on rank 3.  Original reason for failure was: [Rank 3] Watchdog "
         "caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for "
         "1800391 milliseconds before timing out.", 3, 1800.0, None),
        ("[rank4]:[E ProcessGroupNCCL.cpp:1182] [Rank 4] NCCL watchdog thread terminated with exception: [Rank 4] "
         "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
         "Timeout(ms)=600000) ran for 600082 milliseconds before timing out.", 4, 600.0, None),
    ],
)
def test_watchdog_timeout_generations(line: str, rank: int, timeout_s: float, ts: datetime | None) -> None:
    row = one([line])
    assert (row["kind"], row["rank"], row["duration_s"], row["failure_class"]) == ("error", rank, timeout_s, "collective_timeout")
    assert row["ts"] == ts
    assert row["ts_year_known"] is (ts is None)
    assert "WorkNCCL(" in row["message"] and not row["message"].startswith("[E")


@pytest.mark.parametrize(
    ("tag", "rank"),
    [("[PG 1 Rank 0]", 0), ("[PG ID 0 PG GUID 0(default_pg) Rank 1]", 1), ("[PG 0 (default_pg) Rank 12]", 12),
     ("[PG ID 1 PG GUID 1 Rank 7]", 7)],
)
def test_pg_tags_give_the_rank(tag: str, rank: int) -> None:
    row = one([f"[E ProcessGroupNCCL.cpp:1537] {tag} Timeout at NCCL work: 11, last enqueued NCCL work: 11, "
               "last completed NCCL work: 10."])
    assert (row["rank"], row["failure_class"]) == (rank, "collective_timeout")


def test_rank_prefix_beats_a_sub_group_rank() -> None:
    row = one(["[rank9]:[E1218 20:27:21.484903450 ProcessGroupNCCL.cpp:2168] [PG ID 1 PG GUID 1 Rank 1]  failure "
               "detected by watchdog at work sequence id: 1 PG status: last enqueued work: 547, last completed work: -1"])
    assert row["rank"] == 9


@pytest.mark.parametrize(
    ("line", "kind", "severity", "duration_s", "failure_class"),
    [
        ("[rank12]:[E1003 18:37:01.833575187 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 12] Exception (either an "
         "error or timeout) detected by watchdog at work: 6463, last enqueued NCCL work: 6463, last completed NCCL work: 6462.",
         "error", "error", None, "collective_timeout"),
        ("[rank0]:[E606 09:09:08.169193939 ProcessGroupNCCL.cpp:2395] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure "
         "detected by watchdog at work sequence id: 1 PG status: last enqueued work: 1, last completed work: -1",
         "error", "error", None, "collective_timeout"),
        ("[rank0]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] Heartbeat monitor timed out! Process will be terminated "
         "after dumping debug info. workMetaList_.size()=1", "error", "critical", None, "collective_timeout"),
        ("[rank0]:[F ProcessGroupNCCL.cpp:1157] [PG 0 Rank 0] [PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 "
         "seconds without making progress in monitoring enqueued collectives.", "error", "critical", 480.0,
         "collective_timeout"),
        ("[rank1]:[E ProcessGroupNCCL.cpp:583] [Rank 1] To avoid data inconsistency, we are taking the entire process down.",
         "error", "critical", None, "collective_timeout"),
        ("[rank1]:[E ProcessGroupNCCL.cpp:577] [Rank 1] Some NCCL operations have failed or timed out. Due to the "
         "asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
         "warning", "warning", None, None),
        # the old single-line wording ends with the process going down
        ("[E ProcessGroupNCCL.cpp:325] Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
         "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data. To avoid this inconsistency, we "
         "are taking the entire process down.", "error", "critical", None, "collective_timeout"),
        ("[rank0]:[E ProcessGroupNCCL.cpp:542] [Rank 0] Collective WorkNCCL(SeqNum=89, OpType=ALLREDUCE, NumelIn=67108864, "
         "Timeout(ms)=90000) raised the following async exception: NCCL error: remote process exited or there was a "
         "network error", "error", "error", None, "network"),
        ("[rank0]:[E606 09:10:08.363069113 ProcessGroupNCCL.cpp:818] [Rank 0] NCCL error is detected by watchdog at work: "
         "5, last enqueued NCCL work: 5, last completed NCCL work: 4.", "error", "error", None, None),
        ("[rank0]:[E ProcessGroupNCCL.cpp:1900] [PG 0 Rank 0] Some new error the catalogue does not know", "warning",
         "warning", None, None),
    ],
)
def test_watchdog_messages(line: str, kind: str, severity: str, duration_s: float | None, failure_class: str | None) -> None:
    row = one([line])
    assert (row["kind"], row["severity"], row["duration_s"], row["failure_class"]) == (kind, severity, duration_s, failure_class)


def test_hard_wrapped_numel_is_joined() -> None:
    lines = [
        "E1206 18:44:12.715298 1234 ProcessGroupNCCL.cpp:1191] [Rank 5] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=77, OpType=_ALLGATHER_BASE, NumelIn=18561",
        "4592, NumelOut=1484931072, Timeout(ms)=1800000) ran for 1800521 milliseconds before timing out.",
        "E1206 18:44:12.800000 1234 ProcessGroupNCCL.cpp:1191] [Rank 6] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=77, OpType=_ALLGATHER_BASE, NumelIn=185614592, NumelOut=1484931072, Timeout(ms)=1800000) ran for",
        " 1800522 milliseconds before timing out.",
        "Watchdog caught collective operation timeout:",
        "WorkNCCL(SeqNum=1, OpType=ALLGATHER, NumelIn=1, NumelOut=4, Timeout(ms)=600000)",
    ]
    ev = extract_lines(parser, lines)
    assert ev.select("line", "line_end", "rank", "duration_s").rows() == [(1, 2, 5, 1800.0), (3, 4, 6, 1800.0), (5, 6, None, 600.0)]
    assert "NumelIn=185614592, NumelOut" in ev["message"][0]
    assert ev["message"][1].endswith("ran for 1800522 milliseconds before timing out.")


def test_a_wrap_never_swallows_the_next_record() -> None:
    lines = [
        "[rank10]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=167, OpType=ALLREDUCE, NumelIn=1, NumelOut=1",
        "[rank11]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=167, OpType=ALLREDUCE, Timeout(ms)=600000)",
    ]
    ev = extract_lines(parser, lines)
    assert ev.select("line", "line_end", "rank").rows() == [(1, None, 10), (2, None, 11)]


def test_desync_verdicts() -> None:
    lines = [
        "\t - [0] Timeout at collective: ALLREDUCE, #41208",
        "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
        "\t   - [47] joined but didn't finish collective #41207 (count from 1)",
        "\t     [0, 1, 2] finished collective #41207, but didn't join collective #41208 (count from 1)",
        "\t - Snapshot of ranks' latest states:",
        "\t   #41207 started ranks:",
        "\t     [47] started ALLREDUCE",
        "\t   #41207 finished ranks:",
        "\t     [0, 1, 2] finished ALLREDUCE",
        "\t - To our best knowledge, ranks [3, 5] are the lagging ranks that caused this timeout. They never joined any collectives",
    ]
    ev = classified(extract_lines(parser, lines))
    assert ev.select("line", "rank", "failure_class").rows() == [
        (3, 47, "collective_timeout"), (4, 0, "software"), (10, 3, "collective_timeout")
    ]
    assert ev["message"][0] == "[47] joined but didn't finish collective #41207 (count from 1)"
    assert all(_noise(lines[i]) for i in (0, 1, 4, 5, 6, 7, 8))


def test_flight_recorder_lines() -> None:
    lines = [
        "[rank1]:[E606 09:09:08.170090097 ProcessGroupNCCL.cpp:801] Stack trace of the failed collective:",
        "#0 _verify_param_shape_across_processes from /opt/venv/lib/python3.13/site-packages/torch/distributed/utils.py:286",
        "#1 __init__ from /opt/venv/lib/python3.13/site-packages/torch/nn/parallel/distributed.py:1020",
        "",
        "[rank3]:[E606 09:09:08.170204045 ProcessGroupNCCL.cpp:2732] [PG ID 0 PG GUID 0(default_pg) Rank 3] First PG on "
        "this rank to signal dumping.",
        "[rank3]:[E606 09:09:08.172519935 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID 0(default_pg) Rank 3] Received a dump "
        "signal due to a collective timeout from this local rank and we will try our best to dump the debug info.",
        "[rank0]:[E813 12:25:30.692194747 ProcessGroupNCCL.cpp:670] Stack trace of the failed collective not found, "
        "potentially because FlightRecorder is disabled.",
        "[rank0]:[I606 09:10:08.363069113 ProcessGroupNCCL.cpp:1700] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
        "ProcessGroupNCCL dumping nccl trace to /tmp/nccl_trace_rank_0",
        "#3 unrelated from nowhere.py:1",
    ]
    ev = extract_lines(parser, lines)
    assert ev.select("line", "line_end", "kind", "rank").rows() == [(1, 3, "info", 1), (6, None, "info", 3), (8, None, "info", 0)]
    assert ev["message"][2].endswith("dumping nccl trace to /tmp/nccl_trace_rank_0")
    assert _noise(lines[4]) and _noise(lines[6])


def test_glog_time_yields_to_a_collector_stamp(tmp_path: Path) -> None:
    # the collector's stamp has a year and a zone; the glog stamp on the same line has neither
    ev = parse_file_lines(tmp_path, [
        "2023-10-05T04:00:22.604-07:00 [E1005 11:00:22.600000 ProcessGroupNCCL.cpp:1191] [Rank 9] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=8, OpType=BROADCAST, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.",
        "[E1005 11:00:23.000000 ProcessGroupNCCL.cpp:1191] [Rank 8] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=8, OpType=BROADCAST, Timeout(ms)=600000) ran for 600011 milliseconds before timing out.",
    ])
    assert ev.select("ts", "ts_offset_s", "ts_year_known").rows() == [
        (datetime(2023, 10, 5, 4, 0, 22, 604000), -25200, True),
        (datetime(2000, 10, 5, 11, 0, 23), None, False),
    ]


def test_what_and_terminate_lines_are_left_to_the_torch_parser() -> None:
    lines = [
        "[default3]:terminate called after throwing an instance of 'c10::CUDAError'",
        "[default3]:  what():  CUDA error: unknown error",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG 0 Rank 1] Process group watchdog thread terminated with exception: [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600316 ms",
    ]
    assert extract_lines(parser, lines).height == 0


# --- contract and properties -----------------------------------------------------------------------


def test_registered_under_its_name() -> None:
    assert default_registry().get("nccl") is parser
    assert parser.source == "nccl"


def test_rules_load_and_are_prefixed() -> None:
    ours = [r for r in _RULES if r.origin.endswith("nccl.toml")]
    assert len(ours) >= 15 and all(r.id.startswith("nccl-") for r in ours)


_REAL_LINES = [ln for p in sorted(REAL.glob("*.log")) for ln in p.read_text().splitlines()][:200]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=120), st.sampled_from(_REAL_LINES)), min_size=1, max_size=30))
def test_never_raises_and_returns_the_raw_schema(lines: list[str]) -> None:
    lines = [ln.replace("\n", " ").replace("\r", " ") for ln in lines]
    out = extract_lines(parser, lines)
    if out.width == 0:
        return
    assert out.schema == RAW_SCHEMA
    assert set(out["kind"]) <= set(KINDS) and set(out["severity"]) <= set(SEVERITIES)
    assert out["message"].null_count() == 0 and out["line"].null_count() == 0
    assert (out["line"] >= 1).all() and (out["line"] <= len(lines)).all()
    assert out.filter(pl.col("line_end").is_not_null() & (pl.col("line_end") <= pl.col("line"))).height == 0
    assert out["line"].is_unique().all()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60), max_size=8))
def test_real_lines_keep_their_events_among_noise(junk: list[str]) -> None:
    junk = [("x " + j.replace("\n", " ").replace("\r", " ")) for j in junk]  # never a record start
    lines = IB_FILE.read_text().splitlines()
    out = extract_lines(parser, junk + lines)
    assert out.height == 1
    assert (out["line"][0], out["code"][0]) == (len(junk) + 2, "12")


