"""kernel parser: dmesg / syslog / journal records of the GPU driver, NVSwitch, NICs and the host.

Reads every clock/prefix variant of kernel logs (plain and ``-H``/``-T``/``-x``/ISO dmesg,
syslog with and without a year, journalctl text and JSON output, rsyslog RFC3339, Talos, OpenWrt
logread) plus the NVIDIA fabric manager log, ``ibstat``/``ibdev2netdev`` and ``ipmitool sel
elist`` snapshots, and turns them into events:

* GPU: NVRM Xid (``code`` = the Xid number, ``device`` = ``0000:3b:00``), fallen-off-the-bus
  and reset-required notices without an Xid, GSP timeouts, crash dumps; ``gpu`` is filled only
  when the same file maps the PCI address to an index (nvidia-smi lines);
* NVSwitch: SXid records and fabric manager errors (``code`` = ``SX`` + number);
* network: mlx5/IB port and netdev link down/up, transceiver module errors, slot power, NIC
  firmware health, bonding, ibstat;
* host: EDAC, MCE, APEI/GHES, PCIe AER/DPC/hotplug, IPMI SEL, boots;
* storage: block/NVMe I/O errors, filesystem errors, NFS/Lustre trouble, hung tasks;
* the OOM killer, lockups, panics and oopses;
* GPU and fabric tools pasted alongside: nvidia-smi's lost-GPU errors and ``-q`` memory health,
  ``dcgmi diag`` failures, ``ibstat`` on a vanished HCA (``tools.py``).

``node`` comes from the syslog host field; a bare dmesg leaves it null. Lines without a wall
clock (plain dmesg) keep their monotonic seconds in the message and leave ``ts`` null.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl
from toranalyze_parsers.kernel import gpu as gpu
from toranalyze_parsers.kernel import host as host
from toranalyze_parsers.kernel import net as net
from toranalyze_parsers.kernel import proc as proc
from toranalyze_parsers.kernel import storage as storage
from toranalyze_parsers.kernel import tools as tools
from toranalyze_parsers.kernel.common import has
from toranalyze_parsers.kernel.prefix import peel_prefixes

from toranalyze.plugins import Parser
from toranalyze.schema import conform_raw, empty_raw

# Lines worth a closer look: kernel-log prefixes, or a fragment one of the detectors needs.
# Everything else (the bulk of a trainer's stdout) is dropped before any regex runs.
_FRAGMENTS = (
    "NVRM", "SXid", "NVSwitch", "nvswitch", "mlx5", "Link", "link ", "carrier", "EDAC", "Hardware Error",
    "Machine", "AER", "pciehp", "DPC:", "I/O error", "I/O Error", "nvme", "EXT4-fs", "XFS (", "BTRFS",
    "JBD2", "Aborting journal", "nfs: server", "Lustre", "LNet", "blocked for more than", "lockup",
    "LOCKUP", "rcu_", "Kernel panic", "BUG", "Oops", "WARNING: CPU", "general protection", "oom",
    "Out of memory", "Killed process", "Memory failure", "temperature above", "Linux version", "reboot: ",
    "Asserted", "Deasserted", "[tid ", "CA '", "State:", "Physical state", " ==> ", "(UUID: GPU-",
    "Port module", "PCIe slot", "kernel:", "kern:", '"__REALTIME_TIMESTAMP"',
    *tools.FRAGMENTS,
)
_KEEP = (
    "|".join(f.replace("(", r"\(").replace("[", r"\[").replace(".", r"\.") for f in _FRAGMENTS)
    + r"|^\s*(?:<\d>)?\[\s*\+?\d+\.\d+[\]\s]|^\[[A-Z][a-z]{2} [ A-Z\d]|^\s*(?:kern|user|daemon)\s*:"  # dmesg clocks
    + r"|[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d"  # nvidia-smi bus ids
    + r"|^\s+Port \d+:\s*$|^\s*[A-Za-z]\w* : \S+\s*$"  # ibstat ports, fabric manager record fields
)

# NCCL's own debug lines name mlx5 devices and PCI bus ids but are never kernel records (a big
# training log holds thousands): they leave before the detectors.
_NCCL_DEBUG = r"^[\w.\-]+:\d+:\d+ \[\d+\] (?:\S+:\d+ )?NCCL (?:INFO|TRACE) "

# Each detector with a cheap test on the whole chunk: detectors whose fragments never occur
# are not planned at all (planning a detector costs more than running it on a small chunk).
_DETECTORS: tuple[tuple[pl.Expr, Callable[[pl.LazyFrame], pl.LazyFrame]], ...] = (
    (has("NVRM: Xid"), gpu.xid_events),
    (has("NVRM"), gpu.nvrm_events),
    (has("(UUID: GPU-", "|"), gpu.smi_events),
    (has("SXid"), gpu.sxid_events),
    (pl.col("k_fm"), gpu.fabric_manager_events),
    (has("Link", "link", "carrier"), net.link_events),
    (has("mlx5", "Port module event", "PCIe slot"), net.mlx5_events),
    (has("State:", " ==> "), net.ibstat_events),
    (has(*tools.FRAGMENTS), tools.tool_events),
    (has("EDAC", "Machine", "Hardware Error", "Memory failure", "temperature above", "hardware memory error"),
     host.memory_cpu_events),
    (has("[Hardware Error]"), host.ghes_events),
    (has("AER", "DPC", "pciehp", "pcie"), host.pcie_events),
    (has("Asserted", "Deasserted"), host.sel_events),
    (has("Linux version ", "reboot: "), host.boot_events),
    (has(*storage.FRAGMENTS), storage.storage_events),
    (has("blocked for more than", "lockup", "LOCKUP", "rcu_", "Kernel panic", "BUG", "general protection",
         "Oops", "WARNING: CPU"), proc.trace_events),
    (has("oom-kill", "Killed process", "invoked oom-killer", "Out of memory"), proc.oom_events),
)


class KernelParser(Parser):
    name = "kernel"
    source = "kernel"
    noise = gpu.NOISE + net.NOISE + host.NOISE + storage.NOISE + proc.NOISE
    gates = (_KEEP,)  # extract finds nothing in a block without one of these lines

    def extract(self, lines: pl.LazyFrame) -> pl.LazyFrame:
        kept = lines.filter(pl.col("text").str.contains(_KEEP)).collect()
        kept = kept.filter(~pl.col("text").str.contains(_NCCL_DEBUG))
        if kept.height == 0:  # most non-kernel logs: skip planning a dozen detector queries
            return empty_raw()
        prepared = peel_prefixes(kept.lazy(), journal_json=bool(kept["text"].str.starts_with("{").any())).collect()
        wanted = prepared.select(gate.any().alias(str(i)) for i, (gate, _) in enumerate(_DETECTORS)).row(0)
        frames = [detect(prepared.lazy()).collect() for (_, detect), on in zip(_DETECTORS, wanted, strict=True) if on]
        if not frames:
            return empty_raw()
        found = _with_gpu_index(pl.concat(frames, how="diagonal_relaxed"))
        ctx = prepared.select("line", "k_ts", "k_off", "k_year", "k_inferred", "k_node", "p_ts", "p_off").unique(
            "line", keep="first"
        )
        own = pl.col("ts").is_not_null()
        kernel = pl.col("k_ts").is_not_null()
        events = found.join(ctx, on="line", how="left").lazy().with_columns(
            pl.coalesce("ts", "k_ts", "p_ts").alias("ts"),
            pl.when(own).then(None).when(kernel).then(pl.col("k_off")).otherwise(pl.col("p_off")).alias("ts_offset_s"),
            pl.when(~own & kernel).then(pl.col("k_year")).otherwise(True).alias("ts_year_known"),
            pl.when(~own & kernel).then(pl.col("k_inferred")).otherwise(False).alias("ts_inferred"),
            pl.coalesce("node", "k_node").alias("node"),
        )
        return conform_raw(events.sort("line", maintain_order=True))


def _with_gpu_index(events: pl.DataFrame) -> pl.DataFrame:
    """Fill ``gpu`` from the PCI-address -> index map the file itself states."""
    wanted: dict[str, pl.DataType] = {
        "gpu": pl.Int32(), "device": pl.String(), "uuid": pl.String(), "node": pl.String(), "ts": pl.Datetime("us")
    }
    events = events.with_columns(pl.lit(None, dtype).alias(c) for c, dtype in wanted.items() if c not in events.columns)
    index = gpu.gpu_index_map(events.lazy()).collect()
    return (
        events.join(index, on="device", how="left")
        .with_columns(pl.coalesce("gpu", "_gpu_map").alias("gpu"))
        .drop("_gpu_map", "uuid")
    )


parser = KernelParser()
