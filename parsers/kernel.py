"""kernel parser: dmesg / syslog / journal records of the GPU driver, NVSwitch, NICs and the host.

Reads every clock/prefix variant of kernel logs (plain and ``-H``/``-T``/``-x``/ISO dmesg,
syslog with and without a year, RFC3339 journal and rsyslog, Talos, OpenWrt logread) plus the
NVIDIA fabric manager log, ``ibstat``/``ibdev2netdev`` and ``ipmitool sel elist`` snapshots,
and turns them into events:

* GPU: NVRM Xid (``code`` = the Xid number, ``device`` = ``0000:3b:00``), fallen-off-the-bus
  and reset-required notices without an Xid, GSP timeouts, crash dumps; ``gpu`` is filled only
  when the same file maps the PCI address to an index (nvidia-smi lines);
* NVSwitch: SXid records and fabric manager errors (``code`` = ``SX`` + number);
* network: mlx5/IB port and netdev link down/up, transceiver module errors, slot power, NIC
  firmware health, bonding, ibstat;
* host: EDAC, MCE, APEI/GHES, PCIe AER/DPC/hotplug, IPMI SEL, boots;
* storage: block/NVMe I/O errors, filesystem errors, NFS/Lustre trouble, hung tasks;
* the OOM killer, lockups, panics and oopses.

``node`` comes from the syslog host field; a bare dmesg leaves it null. Lines without a wall
clock (plain dmesg) keep their monotonic seconds in the message and leave ``ts`` null.
"""

from __future__ import annotations

import polars as pl

from toranalyze.plugins import Parser
from toranalyze.schema import conform_raw
from toranalyze_parsers import _kernel_gpu as gpu
from toranalyze_parsers import _kernel_host as host
from toranalyze_parsers import _kernel_net as net
from toranalyze_parsers import _kernel_proc as proc
from toranalyze_parsers import _kernel_storage as storage
from toranalyze_parsers._kernel_prefix import peel_prefixes

# Lines worth a closer look: kernel-log prefixes, or a fragment one of the detectors needs.
# Everything else (the bulk of a trainer's stdout) is dropped before any regex runs.
_FRAGMENTS = (
    "NVRM", "SXid", "NVSwitch", "nvswitch", "mlx5", "Link", "link ", "carrier", "EDAC", "Hardware Error",
    "Machine", "AER", "pciehp", "DPC:", "I/O error", "I/O Error", "nvme", "EXT4-fs", "XFS (", "BTRFS",
    "JBD2", "Aborting journal", "nfs: server", "Lustre", "LNet", "blocked for more than", "lockup",
    "LOCKUP", "rcu_", "Kernel panic", "BUG", "Oops", "WARNING: CPU", "general protection", "oom",
    "Out of memory", "Killed process", "Memory failure", "temperature above", "Linux version", "reboot: ",
    "Asserted", "Deasserted", "[tid ", "CA '", "State:", "Physical state", " ==> ", "(UUID: GPU-",
    "Port module", "PCIe slot", "kernel:", "kern:",
)
_KEEP = (
    "|".join(f.replace("(", r"\(").replace("[", r"\[").replace(".", r"\.") for f in _FRAGMENTS)
    + r"|^\s*(?:<\d>)?\[\s*[+\d]|^\s*(?:kern|user|daemon)\s*:|[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d"
    + r"|^\s+Port \d+:\s*$|^\s*[A-Za-z]\w* : \S+\s*$"  # ibstat ports, fabric manager record fields
)

_DETECTORS = (
    gpu.xid_events,
    gpu.nvrm_events,
    gpu.smi_events,
    gpu.sxid_events,
    gpu.fabric_manager_events,
    net.link_events,
    net.mlx5_events,
    net.ibstat_events,
    host.memory_cpu_events,
    host.ghes_events,
    host.pcie_events,
    host.sel_events,
    host.boot_events,
    storage.storage_events,
    proc.trace_events,
    proc.oom_events,
)


class KernelParser(Parser):
    name = "kernel"
    source = "kernel"
    noise = gpu.NOISE + net.NOISE + host.NOISE + storage.NOISE + proc.NOISE

    def extract(self, lines: pl.LazyFrame) -> pl.LazyFrame:
        prepared = peel_prefixes(lines.filter(pl.col("text").str.contains(_KEEP))).collect().lazy()
        found = pl.concat([detect(prepared) for detect in _DETECTORS], how="diagonal_relaxed")
        found = _with_gpu_index(found)
        ctx = prepared.select("line", "k_ts", "k_off", "k_year", "k_inferred", "k_node", "p_ts", "p_off").unique(
            "line", keep="first"
        )
        own = pl.col("ts").is_not_null()
        kernel = pl.col("k_ts").is_not_null()
        events = found.join(ctx, on="line", how="left").with_columns(
            pl.coalesce("ts", "k_ts", "p_ts").alias("ts"),
            pl.when(own).then(None).when(kernel).then(pl.col("k_off")).otherwise(pl.col("p_off")).alias("ts_offset_s"),
            pl.when(~own & kernel).then(pl.col("k_year")).otherwise(True).alias("ts_year_known"),
            pl.when(~own & kernel).then(pl.col("k_inferred")).otherwise(False).alias("ts_inferred"),
            pl.coalesce("node", "k_node").alias("node"),
        )
        return conform_raw(events.sort("line", maintain_order=True))


def _with_gpu_index(events: pl.LazyFrame) -> pl.LazyFrame:
    """Fill ``gpu`` from the PCI-address -> index map the file itself states."""
    wanted = {"gpu": pl.Int32, "device": pl.String, "uuid": pl.String, "node": pl.String, "ts": pl.Datetime("us")}
    for col, dtype in wanted.items():
        if col not in events.collect_schema():
            events = events.with_columns(pl.lit(None, dtype).alias(col))
    index = gpu.gpu_index_map(events)
    return (
        events.join(index, on="device", how="left")
        .with_columns(pl.coalesce("gpu", "_gpu_map").alias("gpu"))
        .drop("_gpu_map", "uuid")
    )


parser = KernelParser()
