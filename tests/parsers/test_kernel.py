"""kernel parser: dmesg/syslog/journal records of the GPU driver, NVSwitch, NICs and the host."""

from __future__ import annotations

import importlib
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toranalyze_parsers.kernel import parser

from tests.conftest import DATA, assert_golden, extract_lines, parse_file
from toranalyze.ingest.classify import classify, load_rules
from toranalyze.ingest.reader import read_text_events
from toranalyze.schema import KINDS, RAW_SCHEMA, SEVERITIES

HERE = DATA / "kernel"
GOLDEN = HERE / "golden"
REAL = HERE / "real"
FIXTURES = sorted(p for p in HERE.iterdir() if p.is_file())

_RULES = load_rules()


def classified(frame: pl.DataFrame) -> pl.DataFrame:
    """Events with the built-in rules applied, as the pipeline does."""
    return classify(frame.with_columns(pl.lit("kernel").alias("source")), _RULES).collect()


def events(lines: list[str]) -> pl.DataFrame:
    return classified(extract_lines(parser, lines))


def one(line: str) -> dict:
    out = events([line])
    assert out.height == 1, out
    return out.row(0, named=True)


def covered(tmp_path: Path, lines: list[str]) -> tuple[int, int]:
    path = tmp_path / "kern.log"
    path.write_text("\n".join(lines) + "\n")
    result = read_text_events(str(path), [parser])
    return result.covered, result.lines


# --- fixtures built from the exact shapes the tools print --------------------------------------


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_fixture_golden(path: Path) -> None:
    assert_golden(parse_file(parser, path), GOLDEN / f"{path.stem}.json")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dmesg_T_xid79_gpu_fell_off_bus.log", (19, 19)),
        ("dmesg_plain_oom_killer_slurm_cgroup.log", (29, 29)),
        ("journal_short_iso_edac_mce_ghes_aer.log", (30, 30)),
        ("dmesg_H_gsp_timeout_xid119.log", (13, 13)),
        ("talos_nvswitch_sxid_nvlink.log", (11, 11)),
        ("fabricmanager_nvswitch_fatal.log", (14, 14)),
        ("ibstat_ibdev2netdev_port_down.txt", (36, 36)),
        ("ipmi_sel_elist_psu_failure.txt", (6, 6)),
        # 'nvme1n1: detected capacity change' is not recognised
        ("dmesg_nfs_lustre_nvme_hung_task_dstate.log", (42, 43)),
        # a systemd-networkd line in a kernel syslog is not ours
        ("syslog_mlx5_ib_link_flap_cable_temp.log", (17, 18)),
    ],
)
def test_fixture_coverage(name: str, expected: tuple[int, int]) -> None:
    result = read_text_events(str(HERE / name), [parser])
    assert (result.covered, result.lines) == expected


def test_fixture_classes() -> None:
    """The failure each fixture shows is classified as such."""
    want = {
        "dmesg_T_xid79_gpu_fell_off_bus.log": {8: "gpu_hardware", 9: "gpu_hardware", 14: "gpu_hardware", 18: "software"},
        "dmesg_plain_oom_killer_slurm_cgroup.log": {1: "oom_host", 29: "oom_host"},
        "journal_short_iso_edac_mce_ghes_aer.log": {3: None, 4: "host_hardware", 12: "host_hardware", 14: None, 18: "host_hardware"},
        "dmesg_H_gsp_timeout_xid119.log": {3: "gpu_hardware", 12: "gpu_hardware"},
        # a non-fatal SXid (line 5) is a warning without a class: healthy nodes raise them too
        "talos_nvswitch_sxid_nvlink.log": {1: "gpu_interconnect", 4: "gpu_interconnect", 5: None},
        "fabricmanager_nvswitch_fatal.log": {5: "gpu_interconnect", 14: None},
        "ibstat_ibdev2netdev_port_down.txt": {9: None, 26: "network", 36: "network"},
        "ipmi_sel_elist_psu_failure.txt": {3: "host_hardware", 5: None, 6: None},
        "dmesg_nfs_lustre_nvme_hung_task_dstate.log": {1: "storage", 3: None, 4: "storage", 18: "gpu_hardware", 34: "storage"},
        "syslog_mlx5_ib_link_flap_cable_temp.log": {1: "network", 3: "network", 6: None, 12: "host_hardware"},
    }
    for name, by_line in want.items():
        ev = classified(parse_file(parser, HERE / name))
        got = dict(zip(ev["line"].to_list(), ev["failure_class"].to_list(), strict=True))
        for line, cls in by_line.items():
            assert got[line] == cls, (name, line, got)


# --- real logs of other families: the kernel parser stays silent ----------------------------------


@pytest.mark.parametrize("path", sorted(REAL.glob("*.log")), ids=lambda p: p.stem)
def test_no_events_on_trainer_nccl_slurm_logs(path: Path) -> None:
    result = read_text_events(str(path), [parser])
    assert result.events.height == 0
    assert result.covered == 0


# --- clocks and prefixes -------------------------------------------------------------------------

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def test_plain_dmesg_keeps_monotonic_seconds_and_no_clock() -> None:
    row = one(f"[ 1234.567890] {XID}")
    assert row["ts"] is None
    assert row["message"] == f"[1234.567890] {XID}"
    assert row["node"] is None


def test_kmsg_priority_prefix() -> None:
    row = one(f"<3>[ 1234.567890] {XID}")
    assert row["message"] == f"[1234.567890] {XID}"


def test_dmesg_T_ctime() -> None:
    row = one(f"[Mon Dec  6 18:44:12 2021] {XID}")
    assert row["ts"] == datetime(2021, 12, 6, 18, 44, 12)
    assert row["ts_year_known"] is True
    assert row["ts_offset_s"] is None
    assert row["message"] == XID


def test_dmesg_H_header_then_deltas() -> None:
    out = events(["[Dec 6 18:44] " + XID, "[  +0.000316] " + XID, "[  +1.500000] " + XID])
    assert out["ts"].to_list() == [
        datetime(2000, 12, 6, 18, 44),
        datetime(2000, 12, 6, 18, 44, 0, 316),
        datetime(2000, 12, 6, 18, 44, 1, 500316),
    ]
    assert out["ts_year_known"].to_list() == [False, False, False]
    assert out["ts_inferred"].to_list() == [False, True, True]


def test_syslog_is_yearless_and_names_the_node() -> None:
    row = one(f"Dec  6 18:44:12 gpu-node-07 kernel: {XID}")
    assert row["ts"] == datetime(2000, 12, 6, 18, 44, 12)
    assert row["ts_year_known"] is False
    assert row["node"] == "gpu-node-07"
    assert row["message"] == XID


def test_syslog_with_monotonic_clock_and_precise_seconds() -> None:
    row = one(f"Aug 10 22:40:59.883581 anthill kernel: [ 8659.726062] {XID}")
    assert row["ts"] == datetime(2000, 8, 10, 22, 40, 59, 883581)
    assert row["node"] == "anthill"
    assert row["message"] == f"[8659.726062] {XID}"


@pytest.mark.parametrize(
    ("prefix", "ts", "offset"),
    [
        ("2024-03-01T12:00:00.123456+00:00 node3 kernel: ", datetime(2024, 3, 1, 12, 0, 0, 123456), 0),
        ("2024-03-01T13:00:00+0100 node3 kernel: ", datetime(2024, 3, 1, 13), 3600),  # journalctl -o short-iso
        ("2024-03-01T12:00:00.123456-07:00 node3 kernel: ", datetime(2024, 3, 1, 12, 0, 0, 123456), -25200),
    ],
)
def test_rfc3339_journal(prefix: str, ts: datetime, offset: int) -> None:
    row = one(prefix + XID)
    assert (row["ts"], row["ts_offset_s"], row["ts_year_known"], row["node"]) == (ts, offset, True, "node3")
    assert row["message"] == XID


@pytest.mark.parametrize(
    ("prefix", "ts", "offset"),
    [
        ("Tue 2024-06-18 02:41:07 UTC node3 kernel: ", datetime(2024, 6, 18, 2, 41, 7), 0),
        ("Tue 2024-06-18 04:41:07.250000 +0200 node3 kernel: ", datetime(2024, 6, 18, 4, 41, 7, 250000), 7200),
        ("Tue 2024-06-18 04:41:07 CEST node3 kernel: ", datetime(2024, 6, 18, 4, 41, 7), None),
        ("1718678467.123456 node3 kernel: ", datetime(2024, 6, 18, 2, 41, 7, 123456), 0),
    ],
)
def test_journal_short_full_and_short_unix(prefix: str, ts: datetime, offset: int | None) -> None:
    row = one(prefix + XID)
    assert (row["ts"], row["ts_offset_s"], row["node"], row["message"]) == (ts, offset, "node3", XID)


def test_dmesg_d_delta_inside_the_monotonic_stamp() -> None:
    assert one(f"[ 1234.567890 <    0.000316>] {XID}")["message"] == f"[1234.567890] {XID}"


def test_journal_short_monotonic() -> None:
    row = one(f"[ 8659.726062] node3 kernel: {XID}")
    assert row["node"] == "node3"
    assert row["message"] == f"[8659.726062] {XID}"


def test_talos_kern_prefix() -> None:
    row = one(f"172.20.0.5: kern: warning: [2024-11-05T07:12:41.402215115Z]: {XID}")
    assert row["ts"] == datetime(2024, 11, 5, 7, 12, 41, 402215)
    assert row["ts_offset_s"] == 0
    assert row["node"] == "172.20.0.5"


def test_dmesg_x_iso_with_comma_fraction() -> None:
    row = one(f"kern  :err   : 2025-01-25T10:34:54,859532+00:00 {XID}")
    assert row["ts"] == datetime(2025, 1, 25, 10, 34, 54, 859532)
    assert row["ts_offset_s"] == 0
    assert row["message"] == XID


def test_openwrt_logread() -> None:
    row = one(f"Sun Jun 11 23:02:41 2023 kern.err kernel: [39210.778735] {XID}")
    assert row["ts"] == datetime(2023, 6, 11, 23, 2, 41)
    assert row["node"] is None
    assert row["message"] == f"[39210.778735] {XID}"


def test_journalctl_json_records() -> None:
    record = (
        '{"__CURSOR":"s=1;i=2","__REALTIME_TIMESTAMP":"1718678467123456","_HOSTNAME":"node3","_TRANSPORT":"kernel",'
        '"SYSLOG_IDENTIFIER":"kernel","PRIORITY":"3","MESSAGE":"' + XID + '"}'
    )
    row = one(record)
    assert (row["ts"], row["ts_offset_s"], row["node"], row["message"], row["code"]) == (
        datetime(2024, 6, 18, 2, 41, 7, 123456),
        0,
        "node3",
        XID,
        "79",
    )
    # The kernel transport makes a generic link line count as a kernel record.
    assert one(record.replace(XID, "ib0: carrier lost"))["state"] == "DOWN"
    assert events([record.replace('"_TRANSPORT":"kernel",', "").replace('"kernel"', '"app"').replace(XID, "ib0: carrier lost")]).height == 0


def test_reader_fills_time_from_peeled_iso_prefix(tmp_path: Path) -> None:
    path = tmp_path / "kern.log"
    path.write_text(f"2024-03-01T12:00:00+00:00 node9 kernel: {XID}\n")
    row = parse_file(parser, path).row(0, named=True)
    assert (row["ts"], row["ts_offset_s"], row["node"]) == (datetime(2024, 3, 1, 12), 0, "node9")


# --- NVRM ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "code", "device", "severity", "failure_class"),
    [
        (XID, "79", "0000:3b:00", "critical", "gpu_hardware"),
        ("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.", "79", "0000:44:00", "critical", "gpu_hardware"),
        ("NVRM: Xid (PCI:0000:0c:00.0): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.", "79", "0000:0c:00", "critical", "gpu_hardware"),
        ("NVRM: Xid (0000:02:00): 13, 0001 00000000 000090c0 00001b0c 00000000 00000000", "13", "0000:02:00", "error", "software"),
        ("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter", "13", "0000:cb:00", "error", "software"),
        ("NVRM: Xid (PCI:0000:00:07): 31, pid=2512125, name=python3.10, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 faulted @ 0x73ac_1c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE", "31", "0000:00:07", "error", "software"),
        ("NVRM: Xid (PCI:0000:00:05): 43, pid=1045242, name=pt_main_thread, Ch 00000008", "43", "0000:00:05", "error", "software"),
        ("NVRM: Xid (PCI:0000:17:00): 48, An uncorrectable double bit error was detected.", "48", "0000:17:00", "critical", "gpu_memory"),
        ("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.", "63", "0000:10:1c", "warning", "gpu_memory"),
        ("NVRM: Xid (PCI:0000:10:1c): 64, pid=1896, Row Remapper: Failed to remap row, reset gpu", "64", "0000:10:1c", "critical", "gpu_memory"),
        ("NVRM: Xid (PCI:0000:9b:00): 92, pid=1234, name=python3, High single-bit ECC error rate", "92", "0000:9b:00", "warning", "gpu_memory"),
        ("NVRM: Xid (PCI:0000:9b:00): 94, pid=1234, name=python3, Contained ECC error", "94", "0000:9b:00", "error", "gpu_memory"),
        ("NVRM: Xid (PCI:0000:00:08): 95, pid='<unknown>', name=<unknown>, Uncontained: FBHUB. RST: Yes, D-RST: No", "95", "0000:00:08", "critical", "gpu_memory"),
        ("NVRM: Xid (PCI:0000:3b:00): 140, pid=77, name=python, Unrecovered ECC Error", "140", "0000:3b:00", "critical", "gpu_memory"),
        ("NVRM: Xid (PCI:0000:18:00): 74, pid=2851, name=python3, NVLink: fatal error detected on link 7", "74", "0000:18:00", "critical", "gpu_interconnect"),
        ("NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)", "145", "0018:01:00", "warning", "gpu_interconnect"),
        ("NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)", "149", "0000:00:00", "critical", "gpu_interconnect"),
        ("NVRM: Xid (PCI:0000:01:00): 119, Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) sequence 1321", "119", "0000:01:00", "critical", "gpu_hardware"),
        ("NVRM: Xid (PCI:0000:3b:00): 120, pid=99, name=python, GSP task exception", "120", "0000:3b:00", "critical", "gpu_hardware"),
        ("NVRM: Xid (PCI:0000:3b:00): 62, pid=99, name=python, 0000(0000) 00000000 00000000", "62", "0000:3b:00", "critical", "gpu_hardware"),
        ("NVRM: Xid (PCI:0000:3b:00): 61, pid=99, name=python, 0cec(3098) 00000000 00000000", "61", "0000:3b:00", "warning", "gpu_hardware"),
        ("NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005", "109", "0000:cb:00", "error", None),
        ("NVRM: Xid (PCI:00000000:3B:00.0): 79, GPU has fallen off the bus.", "79", "0000:3b:00", "critical", "gpu_hardware"),
    ],
)
def test_xid(line: str, code: str, device: str, severity: str, failure_class: str | None) -> None:
    row = one(line)
    assert row["kind"] == "error"
    assert (row["code"], row["device"], row["severity"], row["failure_class"]) == (code, device, severity, failure_class)
    assert row["gpu"] is None  # nothing in the file maps the address to an index


def test_xid_154_recovery_action() -> None:
    bad = one("NVRM: Xid (PCI:0000:b1:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)")
    assert (bad["kind"], bad["severity"], bad["failure_class"]) == ("error", "critical", "gpu_hardware")
    ok = one("NVRM: Xid (PCI:0000:b1:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)")
    assert (ok["kind"], ok["severity"], ok["failure_class"]) == ("info", "info", None)


def test_xid_45_takes_the_class_of_its_cause() -> None:
    out = events(
        [
            "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
            "NVRM: Xid (PCI:0000:ed:00): 45, pid=1818992, name=python3, Ch 0000000c caused by previous Xid 145",
            "NVRM: Xid (PCI:0000:3b:00): 48, pid=7, name=python, An uncorrectable double bit error",
            "NVRM: Xid (PCI:0000:3b:00): 45, pid=7, name=python, Ch 00000008",
            "NVRM: Xid (PCI:0000:5e:00): 45, pid=8, name=python, Ch 00000010",
        ]
    )
    assert out["failure_class"].to_list() == ["gpu_interconnect", "gpu_interconnect", "gpu_memory", "gpu_memory", None]
    assert out["message"][3].endswith("(follows Xid 48 on this GPU)")
    # A lone 45 (a ctrl-C, a scancel) is only a warning.
    assert (out["kind"][4], out["severity"][4]) == ("warning", "warning")


def test_xid_45_after_a_reboot_does_not_inherit_the_old_failure() -> None:
    out = events(
        [
            "[  100.000001] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
            "[    0.000000] Linux version 5.15.0-101-generic (buildd@lcy02-amd64-031) #111-Ubuntu SMP",
            "[  500.000001] NVRM: Xid (PCI:0000:3b:00): 45, pid=7, name=python, Ch 00000008",
        ]
    )
    xid45 = out.filter(pl.col("code") == "45").row(0, named=True)
    assert xid45["failure_class"] is None
    assert out.filter(pl.col("kind") == "node_state")["state"].to_list() == ["BOOT"]


@pytest.mark.parametrize(
    ("line", "device"),
    [
        ("NVRM: GPU 0000:05:00.0: GPU has fallen off the bus.", "0000:05:00"),
        ("NVRM: GPU at 0000:01:00.0 has fallen off the bus.", "0000:01:00"),
        ("NVRM: GPU at PCI:0000:01:00.0 has fallen off the bus.", "0000:01:00"),
    ],
)
def test_fallen_off_the_bus_without_xid(line: str, device: str) -> None:
    row = one(line)
    assert (row["kind"], row["code"], row["device"], row["failure_class"]) == ("error", None, device, "gpu_hardware")


def test_fallen_off_the_bus_split_over_three_lines_is_one_event() -> None:
    out = events(
        [
            "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
            "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
            "               NVRM: fallen off the bus and is not responding to commands.",
            "[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).",
        ]
    )
    first = out.row(0, named=True)
    assert (first["line"], first["line_end"], first["device"], first["failure_class"]) == (1, 3, "0000:b3:00", "gpu_hardware")
    assert "fallen off the bus and is not responding" in first["message"]
    assert out.row(1, named=True)["kind"] == "warning"


def test_reset_required_without_xid_is_one_event_per_burst() -> None:
    line = (
        "[  +0.000003] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] "
        "(0x00000062) returned from status @ kernel_channel.c:2874"
    )
    out = events([line] * 5)
    assert out.height == 1
    assert out["failure_class"][0] == "gpu_hardware"


def test_gsp_banner_alone_stands_for_xid_119() -> None:
    out = events(["NVRM: _kgspLogXid119: ********************************* GSP Timeout **********************************"])
    assert (out["code"][0], out["failure_class"][0]) == ("119", "gpu_hardware")
    # With its Xid line right after, the banner is only part of that record.
    out = events(
        [
            "NVRM: _kgspLogXid119: ********************************* GSP Timeout **********************************",
            "NVRM: _kgspLogXid119: Note: Please also check logs above.",
            "NVRM: Xid (PCI:0000:01:00): 119, Timeout after 6s of waiting for RPC response from GPU0 GSP!",
        ]
    )
    assert out["line"].to_list() == [3]


def test_amdgpu_uncorrectable_hardware_error_is_the_gpu() -> None:
    # https://github.com/ROCm/legacy-rocm-build/issues/4021: AMD's RAS handler on an MI300X.
    out = events([
        "[13850.912648] amdgpu 0000:1c:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!",
        "[13850.927924] amdgpu 0000:42:00.0: {1}[Hardware Error]: Accelerator Check Architecture events logged",
        "[13850.927941] amdgpu 0000:42:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0x98000800003e0000",
    ])
    assert out.select("line", "kind", "device", "failure_class").rows() == [(1, "error", "0000:1c:00", "gpu_hardware")]


def test_amdgpu_ring_timeout_is_the_gpu_in_both_layouts() -> None:
    # https://github.com/ROCm/legacy-rocm-build/issues/2533 (older drm prefix, no PCI address) and
    # https://github.com/ROCm/legacy-rocm-build/issues/6273 (newer: the device names itself).
    out = events([
        "[ 2237.944235] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring sdma0 timeout, signaled seq=16060, emitted seq=16062",
        "[ 2237.944732] amdgpu 0000:0a:00.0: amdgpu: GPU reset begin!",
        "[127033.279661] amdgpu 0000:c5:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=2662395, emitted seq=2662397",
    ])
    assert out.select("line", "kind", "device", "failure_class").rows() == [
        (1, "error", None, "gpu_hardware"),
        (3, "error", "0000:c5:00", "gpu_hardware"),
    ]


def test_crash_dump_notice_is_a_warning_and_its_continuation_is_covered(tmp_path: Path) -> None:
    lines = [
        "Oct 30 09:49:36 pc kernel: NVRM: A GPU crash dump has been created. If possible, please run",
        "                           NVRM: nvidia-bug-report.sh as root to collect this data before",
        "                           NVRM: the NVIDIA kernel module is unloaded.",
    ]
    row = events(lines).row(0, named=True)
    assert (row["kind"], row["failure_class"]) == ("warning", None)
    assert covered(tmp_path, lines) == (3, 3)


# --- GPU index only when the file states it ------------------------------------------------------


def test_gpu_index_from_nvidia_smi_uuid_and_table_rows() -> None:
    out = events(
        [
            "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0b8e4c1d-9a7f-4e30-8a51-6f4a2b7c1d01)",
            "|   2  NVIDIA H100 80GB HBM3          On  |   00000000:5E:00.0 Off |                    0 |",
            "|   3  Tesla V100-SXM2-32GB           On   | 00000000:1A:00.0 Off |                    0 |",
            "NVRM: GPU at PCI:0000:18:00: GPU-0b8e4c1d-9a7f-4e30-8a51-6f4a2b7c1d01",
            "NVRM: Xid (PCI:0000:18:00): 48, pid=901, name=python, Ch 00000018, DBE",
            "NVRM: Xid (PCI:0000:5e:00): 94, pid=902, name=python, Contained: SM (0x1).",
            "NVRM: Xid (PCI:0000:1a:00): 79, GPU has fallen off the bus.",
            "NVRM: Xid (PCI:0000:2a:00): 79, GPU has fallen off the bus.",
        ]
    )
    xids = out.filter(pl.col("code").is_not_null())
    assert dict(zip(xids["device"], xids["gpu"], strict=True)) == {
        "0000:18:00": 0,
        "0000:5e:00": 2,
        "0000:1a:00": 3,
        "0000:2a:00": None,
    }


def test_conflicting_gpu_index_is_dropped() -> None:
    out = events(
        [
            "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:5E:00.0 Off |                    0 |",
            "|   1  NVIDIA H100 80GB HBM3          On  |   00000000:5E:00.0 Off |                    0 |",
            "NVRM: Xid (PCI:0000:5e:00): 79, GPU has fallen off the bus.",
        ]
    )
    assert out.filter(pl.col("code") == "79")["gpu"].to_list() == [None]


# --- NVSwitch -------------------------------------------------------------------------------------


def test_sxid_record_of_three_lines_is_one_event() -> None:
    out = events(
        [
            "[   38.178720] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt",
            "[   38.180708] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44 Sub-engine instance 00",
            "[   38.183583] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002c, 0x0000002c, 0x00000000, 0x0000002c, 0x80005302, 0x00000000, 0x00000000, 0x00000000, 0x00000000}",
            "[   38.187830] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 45 Minion Link DLREQ interrupt",
        ]
    )
    assert out["line"].to_list() == [1, 4]
    first = out.row(0, named=True)
    assert (first["line_end"], first["code"], first["device"], first["kind"], first["severity"]) == (
        3,
        "SX22013",
        "0000:04:00",
        "warning",
        "warning",
    )
    assert first["failure_class"] is None  # non-fatal: a warning, never a root cause
    assert first["message"].endswith("[Severity 0 Engine instance 44 Sub-engine instance 00]")


def test_fatal_sxid_is_critical() -> None:
    row = events(["nvidia-nvswitch2: SXid (PCI:0000:c1:00.0): 20034, Fatal, Link 30 LTSSM Fault Up"]).row(0, named=True)
    assert (row["kind"], row["severity"], row["code"], row["failure_class"]) == ("error", "critical", "SX20034", "gpu_interconnect")


def test_fabric_manager_nvswitch_error() -> None:
    row = one(
        "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on NVSwitch "
        "pci bus id 00000000:86:00.0 physical id 3 port 33"
    )
    assert row["ts"] == datetime(2024, 7, 23, 7, 53, 55)
    assert (row["code"], row["device"], row["severity"], row["failure_class"]) == ("SX20034", "0000:86:00", "critical", "gpu_interconnect")
    assert row["message"].startswith("[ERROR] detected NVSwitch fatal error 20034")


def test_fabric_manager_info_is_noise(tmp_path: Path) -> None:
    line = "[Jul 23 2024 07:41:02] [INFO] [tid 835] Fabric Manager version 535.183.01 is running with the following configuration options"
    assert events([line]).height == 0
    assert covered(tmp_path, [line]) == (1, 1)


# --- network --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind", "state", "device", "failure_class"),
    [
        ("mlx5_core 0000:08:00.0 mlx5_0: Port: 1 Link DOWN", "error", "DOWN", "0000:08:00", "network"),
        ("mlx5_core 0000:08:00.0 rdmap8s0f0: Port: 2 Link ACTIVE", "info", "UP", "0000:08:00", None),
        ("mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link INIT", "info", "INIT", "0000:ab:00", None),
        ("mlx5_eth0: Port: 1 Link DOWN", "error", "DOWN", None, "network"),
        ("mlx5_core 0000:53:00.0 enp83s0f0np0: Link down", "error", "DOWN", "0000:53:00", "network"),
        ("mlx5_core 0000:53:00.0 enp83s0f0np0: Link up", "info", "UP", "0000:53:00", None),
        ("igc 0000:05:00.0 eth5: NIC Link is Down", "error", "DOWN", "0000:05:00", "network"),
        ("ice 0000:31:00.0 ens1f0: NIC Link is up 100 Gbps Full Duplex, Requested FEC: RS-FEC", "info", "UP", "0000:31:00", None),
        ("r8169 0000:03:00.0 enp3s0: Link is Down", "error", "DOWN", "0000:03:00", "network"),
        ("bond0: (slave ib1): link status definitely down, disabling slave", "error", "DOWN", None, "network"),
        ("bond0: link status definitely down for interface eth0, disabling it", "error", "DOWN", None, "network"),
    ],
)
def test_link_changes(line: str, kind: str, state: str, device: str | None, failure_class: str | None) -> None:
    row = one(f"[ 4443.968257] {line}")
    assert (row["kind"], row["state"], row["device"], row["failure_class"]) == (kind, state, device, failure_class)


def test_generic_link_words_need_a_kernel_prefix() -> None:
    assert events(["eth0: Link is Down"]).height == 0
    assert events(["ib0: carrier lost, reconnecting"]).height == 0
    assert one("[ 12.5] ib0: carrier lost")["state"] == "DOWN"
    assert one("Mar 12 03:14:07 n1 kernel: IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready")["state"] == "UP"


@pytest.mark.parametrize(
    ("line", "kind", "failure_class"),
    [
        ("mlx5_core 0000:5c:00.0: mlx5_port_module_event:1131:(pid 0): Port module event[error]: module 0, Cable error, High Temperature", "error", "network"),
        ("mlx5_core 0000:81:00.0: mlx5_port_module_event:1051:(pid 0): Port module event[error]: module 0, Cable error, Bus stuck (I2C or data shorted)", "error", "network"),
        ("mlx5_core 0000:0a:00.1: Port module event: module 1, Cable unplugged", "warning", None),
        ("mlx5_core 0000:0a:00.1: Port module event: module 1, Cable plugged", "info", None),
        ("mlx5_core 0000:12:00.0: mlx5_pcie_event:299:(pid 0): Detected insufficient power on the PCIe slot (27W).", "warning", "host_hardware"),
        ("mlx5_core 0000:d2:00.0: poll_health:174:(pid 0): device's health compromised - reached miss count", "error", "network"),
        ("mlx5_core 0000:03:00.0: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource", "error", "network"),
    ],
)
def test_mlx5_device_events(line: str, kind: str, failure_class: str | None) -> None:
    row = one(f"[ 8.951695] {line}")
    assert (row["kind"], row["failure_class"]) == (kind, failure_class)
    assert row["device"] is not None


def test_ibstat_ports() -> None:
    out = events(
        [
            "CA 'mlx5_2'",
            "\tCA type: MT4123",
            "\tPort 1:",
            "\t\tState: Initializing",
            "\t\tPhysical state: LinkUp",
            "CA 'mlx5_4'",
            "\tPort 1:",
            "\t\tState: Down",
            "\t\tPhysical state: Disabled",
        ]
    )
    assert out["message"].to_list() == [
        "mlx5_2 port 1: State: Initializing, Physical state: LinkUp",
        "mlx5_4 port 1: State: Down, Physical state: Disabled",
    ]
    assert out["state"].to_list() == ["INIT", "DOWN"]
    assert out["kind"].to_list() == ["warning", "error"]
    assert out["line_end"].to_list() == [5, 9]


def test_state_line_without_ibstat_context_is_ignored() -> None:
    assert events(["    State:          Running", "\t\tState: Active"]).height == 0


# --- host hardware --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind", "severity", "failure_class"),
    [
        ("EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 page:0x849923 offset:0x380 grain:32 syndrome:0x0 -  area:DRAM err_code:0001:0092 socket:0 ha:0 channel_mask:4 rank:0)", "warning", "warning", None),
        ("EDAC MC0: 4 CE error on CPU#0Channel#2_DIMM#0 (channel:2 slot:0 page:0x0 offset:0x0 grain:8 syndrome:0x0)", "warning", "warning", None),
        ("EDAC MC1: 262 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x2031c14 offset:0x940 grain:32 syndrome:0x0 -  OVERFLOW area:DRAM err_code:0001:0091 socket:0 ha:0 channel_mask:2 rank:1)", "warning", "warning", None),
        ("EDAC MC0: 1 UE memory read error on CPU_SrcID#0_MC#0_Chan#0_DIMM#0 (channel:0 slot:0 page:0xe16677 offset:0x0 grain:32 -  err_code:0000:009f socket:0 imc:0 rank:0 bg:0 ba:3 row:dad3 col:3c0)", "error", "critical", "host_hardware"),
        ("mce: [Hardware Error]: Machine check events logged", "warning", "warning", None),
        ("mce: [Hardware Error]: CPU 11: Machine Check Exception: 5 Bank 4: b200000000070005", "error", "critical", "host_hardware"),
        ("mce: Uncorrected hardware memory error in user-access at 3d2c111040", "error", "critical", "host_hardware"),
        ("Memory failure: 0x3d2c111: recovery action for dirty LRU page: Recovered", "error", "error", "host_hardware"),
        ("[Hardware Error]: Uncorrected, software restartable error.", "error", "error", "host_hardware"),
        ("CPU12: Package temperature above threshold, cpu clock throttled (total events = 1)", "warning", "warning", None),
        ("pcieport 0000:00:1c.1: AER: Corrected error received: 0000:00:1c.1", "warning", "warning", None),
        ("pcieport 0000:80:1b.4: AER: Uncorrectable (Non-Fatal) error message received from 0000:80:1b.4", "error", "error", "host_hardware"),
        ("pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: id=0018", "error", "critical", "host_hardware"),
        ("pcieport 0000:00:03.0: DPC: containment event, status:0x1f01 source:0x0000", "error", "error", "host_hardware"),
        ("Kernel panic - not syncing: Fatal hardware error!", "error", "critical", "host_hardware"),
    ],
)
def test_host_hardware(line: str, kind: str, severity: str, failure_class: str | None) -> None:
    row = one(f"[Mon Jan 27 19:27:15 2020] {line}")
    assert (row["kind"], row["severity"], row["failure_class"]) == (kind, severity, failure_class)


def test_aer_device_is_the_reporting_device() -> None:
    row = one("pcieport 0000:b0:02.0: AER: Uncorrected (Fatal) error received: 0000:b1:00.0")
    assert row["device"] == "0000:b1:00"
    row = one("pcieport 0000:00:1c.5: AER: Multiple Corrected error received: id=00e5")
    assert row["device"] == "0000:00:1c"


def test_ghes_record_is_one_event() -> None:
    lines = [
        "kernel: {35}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 4",
        "kernel: {35}[Hardware Error]: It has been corrected by h/w and requires no further action",
        "kernel: {35}[Hardware Error]: event severity: corrected",
        "kernel: {35}[Hardware Error]:  Error 0, type: corrected",
        "kernel: {35}[Hardware Error]:   section_type: memory error",
        "kernel: {35}[Hardware Error]:   error_type: 2, single-bit ECC",
        "kernel: {36}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 512",
        "kernel: {36}[Hardware Error]: event severity: fatal",
        "kernel: {36}[Hardware Error]:   section_type: PCIe error",
        "kernel: {36}[Hardware Error]:   device_id: 0000:20:03.1",
    ]
    out = events(lines)
    assert out["line"].to_list() == [1, 7]
    assert out["line_end"].to_list() == [6, 10]
    assert out["kind"].to_list() == ["warning", "error"]
    assert out["severity"].to_list() == ["warning", "critical"]
    assert out["failure_class"].to_list() == [None, "host_hardware"]
    assert out["device"].to_list() == [None, "0000:20:03"]
    assert out["message"][0] == (
        "{35}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 4; "
        "event severity: corrected; section_type: memory error; error_type: 2, single-bit ECC"
    )


def test_pciehp_slot_link() -> None:
    out = events(
        [
            "pcieport 0000:b0:02.0: pciehp: Slot(20): Link Down",
            "pcieport 0000:b0:02.0: pciehp: Slot(20): Link Up",
        ]
    )
    assert out["state"].to_list() == ["DOWN", "UP"]
    assert out["failure_class"].to_list() == ["host_hardware", None]


def test_ipmi_sel_power_supply() -> None:
    row = one("   3 | 03/01/2024 | 12:00:00 | Power Supply PSU2_Status | Failure detected | Asserted")
    assert row["ts"] == datetime(2024, 3, 1, 12)
    assert (row["kind"], row["failure_class"]) == ("error", "host_hardware")
    assert row["message"] == "SEL: Power Supply PSU2_Status | Failure detected | Asserted"


def test_boot_and_reboot_are_node_states() -> None:
    out = events(
        [
            "[    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) (x86_64-linux-gnu-gcc-13 (Ubuntu 13.2.0-23ubuntu4) 13.2.0) #45-Ubuntu SMP PREEMPT_DYNAMIC",
            "[98765.4321] reboot: Restarting system",
        ]
    )
    assert out["kind"].to_list() == ["node_state", "node_state"]
    assert out["state"].to_list() == ["BOOT", "REBOOT"]


# --- storage --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind", "failure_class"),
    [
        ("blk_update_request: I/O error, dev nvme0n1, sector 0 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0", "error", "storage"),
        ("I/O error, dev nvme0n1, sector 1336320 op 0x0:(READ) flags 0x80700 phys_seg 4 prio class 2", "error", "storage"),
        ("print_req_error: critical medium error, dev sdb, sector 123456", "error", "storage"),
        ("Buffer I/O error on dev nvme0n1, logical block 0, async page read", "error", "storage"),
        ("nvme0n1: I/O Cmd(0x2) @ LBA 1336320, 32 blocks, I/O Error (sct 0x3 / sc 0x71)", "error", "storage"),
        ("nvme nvme0: I/O 14 QID 2 timeout, aborting", "warning", None),
        ("nvme nvme0: I/O 897 QID 2 timeout, completion polled", "warning", None),
        ("nvme nvme0: I/O 263 QID 2 timeout, reset controller", "error", "storage"),
        ("nvme nvme0: controller is down; will reset: CSTS=0xffffffff, PCI_STATUS=0xffff", "error", "storage"),
        ("EXT4-fs error (device md0): ext4_find_entry:1455: inode #2: comm python: reading directory lblock 0", "error", "storage"),
        ("EXT4-fs (nvme1n1p1): Remounting filesystem read-only", "error", "storage"),
        ("XFS (md0): Log I/O Error Detected. Shutting down filesystem", "error", "storage"),
        ("XFS (sdb1): Corruption detected. Unmount and run xfs_repair", "error", "storage"),
        ("nfs: server fs01 not responding, timed out", "error", "storage"),
        ("nfs: server fs01 OK", "info", None),
        ("LustreError: 167-0: fs-OST0001-osc-ffff88203810d800: This client was evicted by fs-OST0001; in progress operations using this service will fail.", "error", "storage"),
        ("LNet: 2431:0:(o2iblnd_cb.c:3174:kiblnd_check_conns()) Timed out tx for 172.31.126.87@o2ib: 403055 seconds", "warning", None),
    ],
)
def test_storage(line: str, kind: str, failure_class: str | None) -> None:
    row = one(f"[ 6062.318421] {line}")
    assert (row["kind"], row["failure_class"]) == (kind, failure_class)


def test_io_error_flood_is_one_event_per_burst(tmp_path: Path) -> None:
    lines = [
        f"[ 6062.3184{i:02d}] blk_update_request: I/O error, dev nvme1n1, sector {2098176 + 1024 * i} op 0x1:(WRITE) flags 0x8800"
        for i in range(40)
    ]
    assert events(lines).height == 1
    assert covered(tmp_path, lines) == (40, 40)


def test_hung_task_record_names_the_modules_in_its_stack() -> None:
    lines = [
        "[  479.971084] INFO: task nfsd:3780 blocked for more than 120 seconds.",
        '[  479.971253] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
        "[  479.971395] nfsd            D ffff88013fc127c0     0  3780      2 0x00000000",
        "[  479.971421] Call Trace:",
        "[  479.971445]  [<ffffffff8135077c>] ? __mutex_lock_common.isra.5+0xff/0x164",
        "[  479.971450]  [<ffffffffa036bafa>] ? exp_find+0xbc/0xc8 [nfsd]",
        "[  480.100000] nfs: server fs01 OK",
    ]
    out = events(lines)
    hung = out.row(0, named=True)
    assert (hung["line"], hung["line_end"], hung["failure_class"]) == (1, 6, "storage")
    assert hung["message"].endswith("[modules: nfsd]")
    assert out["line"].to_list() == [1, 7]


# --- the OOM killer -------------------------------------------------------------------------------


def test_oom_report_is_one_event_with_the_slurm_job() -> None:
    out = classified(parse_file(parser, HERE / "dmesg_plain_oom_killer_slurm_cgroup.log"))
    report = out.row(0, named=True)
    assert (report["line"], report["line_end"], report["job_id"]) == (1, 27, "4471802")
    assert report["message"] == (
        "[269830.115432] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0 | "
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,"
        "oom_memcg=/slurm/uid_11004/job_4471802,task_memcg=/slurm/uid_11004/job_4471802/step_0/task_0,"
        "task=python,pid=2214471,uid=11004 | [269830.115671] Memory cgroup out of memory: Killed process 2214471 "
        "(python) total-vm:856482200kB, anon-rss:513820420kB, file-rss:0kB, shmem-rss:0kB, UID:11004 "
        "pgtables:1039524kB oom_score_adj:0"
    )
    # The later kill has its own line and does not inherit the earlier job's cgroup.
    lone = out.row(1, named=True)
    assert (lone["line"], lone["job_id"], lone["failure_class"]) == (29, None, "oom_host")


def test_old_kernel_kill_pair_and_cgroup_v2_job() -> None:
    out = events(
        [
            "[Thu Dec  7 00:05:15 2017] Memory cgroup out of memory: Kill process 24572 (java) score 0 or sacrifice child",
            "[Thu Dec  7 00:05:15 2017] Killed process 28438 (java) total-vm:20255636kB, anon-rss:466160kB, file-rss:13684kB",
            "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,oom_memcg=/system.slice/slurmstepd.scope/job_991,task_memcg=/system.slice/slurmstepd.scope/job_991/step_0/user/task_0,task=python,pid=4242,uid=1000",
            "Out of memory: Killed process 4242 (python) total-vm:1000kB, anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:4kB oom_score_adj:0",
        ]
    )
    assert out["line"].to_list() == [2, 4]
    assert out["job_id"].to_list() == [None, "991"]
    assert out["failure_class"].to_list() == ["oom_host", "oom_host"]


def test_oom_report_lines_are_covered(tmp_path: Path) -> None:
    lines = (HERE / "dmesg_plain_oom_killer_slurm_cgroup.log").read_text().splitlines()
    assert covered(tmp_path, lines) == (29, 29)


# --- contract ------------------------------------------------------------------------------------


def _check_contract(frame: pl.DataFrame) -> None:
    assert frame.schema == RAW_SCHEMA
    assert set(frame["kind"].to_list()) <= set(KINDS)
    assert set(frame["severity"].to_list()) <= set(SEVERITIES)
    assert frame["message"].null_count() == 0
    assert frame["line"].null_count() == 0


_KERNELISH = st.sampled_from(
    [
        "[ 12.345678] ",
        "[Mon Dec  6 18:44:12 2021] ",
        "Dec  6 18:44:12 host kernel: ",
        "[  +0.000316] ",
        "[Dec 6 18:44] ",
        "172.20.0.2: kern: warning: [2024-03-01T12:00:00Z]: ",
        "",
        "\t\t",
    ]
)
_FRAGMENT = st.sampled_from(
    [
        "NVRM: Xid (PCI:0000:3b:00): ",
        "SXid (PCI:0000:04:00.0): 22013, ",
        "mlx5_core 0000:0c:00.0 mlx5_0: Port: 1 Link ",
        "invoked oom-killer: ",
        "Killed process 12 (",
        "INFO: task x:1 blocked for more than 1 seconds.",
        "{3}[Hardware Error]: event severity: ",
        "AER: Uncorrected (Fatal) error received: ",
        "CA 'mlx5_0'",
        "State: ",
        "| 01/01/2024 | 00:00:00 | a | b | Asserted",
        "oom-kill:constraint=",
        "NVRM: The NVIDIA GPU 0000:b3:00.0",
        "fallen off the bus",
        "[Jul 23 2024 07:53:55] [ERROR] [tid 1] ",
        "x : y",
    ]
)
_LINE = st.builds(lambda a, b, c: a + b + c, _KERNELISH, _FRAGMENT, st.text(max_size=40))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=120), min_size=1, max_size=12))
def test_never_raises_on_arbitrary_text(lines: list[str]) -> None:
    _check_contract(extract_lines(parser, lines) if any(lines) else pl.DataFrame(schema=RAW_SCHEMA))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_LINE, min_size=1, max_size=15))
def test_never_raises_on_kernel_like_garbage(lines: list[str]) -> None:
    out = extract_lines(parser, lines)
    _check_contract(out)
    assert out["line"].is_between(1, len(lines)).all()
    ends = out.filter(pl.col("line_end").is_not_null())
    assert (ends["line_end"] >= ends["line"]).all()


def test_noise_patterns_compile_and_skip_trainer_lines() -> None:
    for pattern in parser.noise:
        re.compile(pattern)
    trainer = [
        " iteration      100/  292968 | consumed samples:        51200 | elapsed time per iteration (ms): 1024.5 | lm loss: 6.4E+00 |",
        "[default3]:RuntimeError: CUDA error: unknown error",
        "srun: error: r6i5n1: task 3: Exited with exit code 1",
    ]
    for line in trainer:
        assert not any(re.search(p, line) for p in parser.noise), line


_LINK_LINES = [
    "Mar 12 03:16:41 gpu-node-017 kernel: [812499.1] mlx5_core 0000:53:00.0: mlx5_ib0: Port: 1 Link DOWN",
    "Mar 12 03:16:44 gpu-node-017 kernel: [812502.4] bond0: (slave enp83s0f0np0): link status definitely down, x",
    "Mar 12 03:16:45 n1 kernel: [1.2] bond0: link status definitely up for interface eth0, 1000 Mbps",
    "Mar 12 03:16:46 n1 kernel: [1.3] ixgbe 0000:3b:00.0 eno1: NIC Link is Down",
    "Mar 12 03:16:47 n1 kernel: [1.4] mlx5_core 0000:3b:00.0 enp59s0: Link up",
    "Mar 12 03:16:48 n1 kernel: [1.5] ib0: carrier lost",
    "Mar 12 03:16:49 n1 kernel: [1.6] ibp59s0: link is down",
    "Mar 12 03:16:50 n1 kernel: [1.7] IPv6: ADDRCONF(NETDEV_CHANGE): eno1: link becomes ready",
]


def _detector_lines() -> pl.DataFrame:
    from toranalyze.ingest.lines import prepare_lines

    texts = [ln for p in sorted((DATA / "kernel").rglob("*")) if p.is_file() and p.suffix in {".log", ".txt"}
             for ln in p.read_text(errors="replace").splitlines()]
    texts += _LINK_LINES
    return prepare_lines(pl.DataFrame({"line": list(range(1, len(texts) + 1)), "raw": texts}))


_KERNEL = importlib.import_module("toranalyze_parsers.kernel")
_PREFIX = importlib.import_module("toranalyze_parsers.kernel.prefix")


@pytest.mark.parametrize("frags, detect", _KERNEL._DETECTORS, ids=lambda d: getattr(d, "__name__", ""))
def test_a_detector_finds_nothing_on_lines_without_its_fragments(frags: tuple[str, ...], detect: Any) -> None:
    """A detector is planned only for blocks holding one of its fragments: every line it reads
    into an event holds one (a fabric manager detector, without fragments, reads k_fm lines)."""
    peeled = _PREFIX.peeled(_detector_lines())
    found = detect(peeled.lazy()).collect()
    hit = peeled.filter(pl.col("line").is_in(found["line"].implode()))
    if frags:
        assert all(any(f in body for f in frags) for body in hit["body"].to_list())
    else:
        assert hit["k_fm"].all()


def test_every_link_layout_is_found() -> None:
    peeled = _PREFIX.peeled(_detector_lines().tail(len(_LINK_LINES)))
    found = _KERNEL.net.link_events(peeled.lazy()).collect()
    assert found.height == len(_LINK_LINES)


REAL_GPU = DATA / "real_excerpts" / "gpu"


def test_a_health_agents_xid_summary_and_nvml_gpu_lost_are_gpu_hardware() -> None:
    # https://github.com/leptonai/gpud/issues/604: an agent's summary of Xid 79, no NVRM line; then
    # NVML's ERROR_GPU_IS_LOST in the agent's error text.
    ev = classified(parse_file(parser, REAL_GPU / "gpud_xid79_summary_gpu_is_lost.log"))
    assert ev.select("line", "code", "device", "failure_class").rows() == [
        (1, "79", "0000:ae:00", "gpu_hardware"),
        (3, None, None, "gpu_hardware"),
    ]


@pytest.mark.parametrize(
    ("line", "code", "failure_class"),
    [
        ("XID 149.0 (err status 0x00000000) NVLINK_NETIR_ERROR NVLINK: NETIR Error detected on GPU PCI:0019:01:00",
         "149", "gpu_interconnect"),
        ("XID 94 (Contained ECC error) detected on PCI:0000:9b:00", "94", "gpu_memory"),
    ],
)
def test_an_xid_summary_takes_the_class_of_its_xid(line: str, code: str, failure_class: str) -> None:
    row = one(line)
    assert (row["code"], row["failure_class"]) == (code, failure_class)


def test_the_drivers_own_xid_line_is_not_read_twice_as_a_summary() -> None:
    ev = events(['[XID found] (54 minutes ago) "NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=python, '
                 'Timeout after 45s of waiting for RPC response from GPU4 GSP!"'])
    assert ev.height == 1 and ev["failure_class"].to_list() == ["gpu_hardware"]
