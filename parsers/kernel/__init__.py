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
* the OOM killer (and a container runtime's record of an OOM kill), lockups, panics and oopses;
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
from toranalyze_parsers.kernel.prefix import peeled

from toranalyze.parser_api import Parser, conform_raw, empty_raw, file_key

# Lines worth a closer look: kernel-log prefixes, or a fragment one of the detectors needs.
# Everything else (the bulk of a trainer's stdout) is dropped before any regex runs.
_FRAGMENTS = (
    "NVRM", "SXid", "NVSwitch", "nvswitch", "mlx5", "Link", "link ", "carrier", "EDAC", "Hardware Error",
    "Machine", "AER", "pciehp", "DPC:", "I/O error", "I/O Error", "nvme", "EXT4-fs", "XFS (", "BTRFS",
    "JBD2", "Aborting journal", "nfs: server", "Lustre", "LNet", "blocked for more than", "lockup",
    "LOCKUP", "rcu_", "Kernel panic", "BUG", "Oops", "WARNING: CPU", "general protection", "oom",
    "Out of memory", "Killed process", "Memory failure", "temperature above", "Linux version", "reboot: ",
    "Asserted", "Deasserted", "[tid ", "CA '", "State:", "Physical state", " ==> ", "(UUID: GPU-",
    "Port module", "PCIe slot", "kernel:", "kern:", '"__REALTIME_TIMESTAMP"', "amdgpu", "TaskOOM",
    *tools.FRAGMENTS,
)
_KEEP = (
    "|".join(f.replace("(", r"\(").replace("[", r"\[").replace(".", r"\.") for f in _FRAGMENTS)
    + r"|^\s*(?:<[0-9]>)?\[\s*\+?[0-9]+\.[0-9]+[\]\s]"  # dmesg clocks
    + r"|^\[[A-Z][a-z]{2} [ A-Z0-9]|^\s*(?:kern|user|daemon)\s*:"
    + r"|[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9]"  # nvidia-smi bus ids
    + r"|^\s+Port [0-9]+:\s*$|^\s*[A-Za-z]\w* : \S+\s*$"  # ibstat ports, fabric manager record fields
)

# NCCL's own debug lines name mlx5 devices and PCI bus ids but are never kernel records (a big
# training log holds thousands): they leave before the detectors.
_NCCL_DEBUG = r"^[\w.\-]+:[0-9]+:[0-9]+ \[[0-9]+\] (?:\S+:[0-9]+ )?NCCL (?:INFO|TRACE) "

# Each detector with a cheap test on the whole chunk: detectors whose fragments never occur
# are not planned at all (planning a detector costs more than running it on a small chunk).
# The test is a literal search of ``body`` for any of the fragments; no fragments: the line
# is a fabric manager record (``k_fm``).
_DETECTORS: tuple[tuple[tuple[str, ...], Callable[[pl.LazyFrame], pl.LazyFrame]], ...] = (
    (("NVRM: Xid",), gpu.xid_events),
    (("NVRM",), gpu.nvrm_events),
    (("(UUID: GPU-", "|"), gpu.smi_events),
    (("SXid",), gpu.sxid_events),
    (("amdgpu",), gpu.amdgpu_events),
    ((), gpu.fabric_manager_events),
    (net.LINK_FRAGMENTS, net.link_events),
    (("mlx5", "Port module event", "PCIe slot"), net.mlx5_events),
    (("State:", " ==> "), net.ibstat_events),
    (tools.FRAGMENTS, tools.tool_events),
    (("EDAC", "Machine", "Hardware Error", "Memory failure", "temperature above", "hardware memory error"),
     host.memory_cpu_events),
    (("[Hardware Error]",), host.ghes_events),
    (("AER", "DPC", "pciehp", "pcie"), host.pcie_events),
    (("Asserted", "Deasserted"), host.sel_events),
    (("Linux version ", "reboot: "), host.boot_events),
    (storage.FRAGMENTS, storage.storage_events),
    (("blocked for more than", "lockup", "LOCKUP", "rcu_", "Kernel panic", "BUG", "general protection",
      "Oops", "WARNING: CPU"), proc.trace_events),
    (("oom-kill", "Killed process", "invoked oom-killer", "Out of memory"), proc.oom_events),
    (proc.RUNTIME_OOM_FRAGMENTS, proc.runtime_oom_events),
)
_GATES = tuple((has(*frags) if frags else pl.col("k_fm")).any() for frags, _ in _DETECTORS)
_PYTHON_GATES = 4096  # rows up to which the tests are Python substring searches (see _wanted)


def _wanted(prepared: pl.DataFrame) -> list[bool]:
    """Per detector: whether its test holds on some line of ``prepared``.

    A small chunk is searched as one Python string: the same literal test without a regex per
    detector, whose compiling, on a thread that also runs the detectors' own patterns, would
    push those out of polars' cache of 32 compiled patterns (and each file would compile all
    of them again). Fragments hold no newline, so joining the lines adds no match."""
    if prepared.height > _PYTHON_GATES:
        return [bool(v) for v in prepared.select(g.alias(str(i)) for i, g in enumerate(_GATES)).row(0)]
    text = "\n".join(prepared["body"].drop_nulls().to_list())
    fabric = bool(prepared["k_fm"].any())
    return [any(f in text for f in frags) if frags else fabric for frags, _ in _DETECTORS]


class KernelParser(Parser):
    name = "kernel"
    source = "kernel"
    noise = gpu.NOISE + net.NOISE + host.NOISE + storage.NOISE + proc.NOISE
    gates = (_KEEP,)  # extract finds nothing in a block without one of these lines
    batched = True  # every fill, count and record stays within its file (see file_key)

    def extract(self, lines: pl.LazyFrame) -> pl.LazyFrame:
        kept = lines.filter(pl.col("text").str.contains(_KEEP)).collect()
        kept = kept.filter(~pl.col("text").str.contains(_NCCL_DEBUG))
        if kept.height == 0:  # most non-kernel logs: skip planning a dozen detector queries
            return empty_raw()
        prepared = peeled(kept)
        plans = [detect(prepared.lazy()) for (_, detect), on in zip(_DETECTORS, _wanted(prepared), strict=True) if on]
        if not plans:
            return empty_raw()
        found = _with_gpu_index(pl.concat([p.collect() for p in plans], how="diagonal_relaxed"))
        ctx = prepared.lazy().select(_CONTEXT).unique("line", keep="first")
        events = found.join(ctx, on="line", how="left").with_columns(_FROM_CONTEXT)
        return conform_raw(events.sort("line", maintain_order=True))


_CONTEXT = ("line", "k_ts", "k_off", "k_year", "k_inferred", "k_node", "p_ts", "p_off")


def _from_context() -> list[pl.Expr]:
    """Time and node of an event from its line's kernel prefix, where the detector set none."""
    own = pl.col("ts").is_not_null()
    kernel = pl.col("k_ts").is_not_null()
    return [
        pl.coalesce("ts", "k_ts", "p_ts").alias("ts"),
        pl.when(own).then(None).when(kernel).then(pl.col("k_off")).otherwise(pl.col("p_off")).alias("ts_offset_s"),
        pl.when(~own & kernel).then(pl.col("k_year")).otherwise(True).alias("ts_year_known"),
        pl.when(~own & kernel).then(pl.col("k_inferred")).otherwise(False).alias("ts_inferred"),
        pl.coalesce("node", "k_node").alias("node"),
    ]


_FROM_CONTEXT = _from_context()
_GPU_INDEX_COLUMNS: dict[str, pl.DataType] = {
    "gpu": pl.Int32(), "device": pl.String(), "uuid": pl.String(), "node": pl.String(), "ts": pl.Datetime("us")
}


def _with_gpu_index(events: pl.DataFrame) -> pl.LazyFrame:
    """Fill ``gpu`` from the PCI-address -> index map the file itself states."""
    missing = [pl.lit(None, dtype).alias(c) for c, dtype in _GPU_INDEX_COLUMNS.items() if c not in events.columns]
    lf = events.lazy().with_columns(missing) if missing else events.lazy()
    if "gpu" not in events.columns or events["gpu"].null_count() == events.height:
        return lf.drop("uuid")  # no row states an index: the map is empty (most files)
    index = gpu.gpu_index_map(lf)
    return (
        lf.with_columns(file_key().alias("_file"))
        .join(index, on=["_file", "device"], how="left")
        .with_columns(pl.coalesce("gpu", "_gpu_map").alias("gpu"))
        .drop("_gpu_map", "uuid", "_file")
    )


parser = KernelParser()

__all__ = ["KernelParser", "parser"]  # the entry point names `parser`
