"""Failures that GPU and fabric tools print, pasted next to kernel logs in post-mortems.

* ``nvidia-smi`` when the driver lost a GPU: ``Unable to determine the device handle for GPU
  0000:0B:00.0: Unknown Error`` (``detect`` on Windows, ``nvmlDeviceGetHandleByIndex(): Unknown
  Error`` from ``nvdebugdump``); ``ERR!`` in the table's fields is a warning only (a power or fan
  reading that failed, often transient);
* ``dcgmi diag`` result tables: a ``Fail - GPU: N`` row under its test name (``GPU Memory``,
  ``Diagnostic``, ...), which may sit on a continuation row whose first column is blank;
* ``ibstat`` aborting on a host channel adapter that vanished: ``ibpanic: ... stat of IB device
  'mlx5_8' failed``;
* a GPU health agent's summary of an Xid it read from the kernel log, without the driver's own
  line: ``XID 79(GPU has fallen off the bus) detected on PCI:0000:ae:00``, ``XID 149.0 (err status
  0x0) NVLINK_NETIR_ERROR ... detected on GPU PCI:0019:01:00`` (``code`` is the Xid number, so
  the Xid rules classify it), and NVML's ``ERROR_GPU_IS_LOST`` (``NVML_ERROR_GPU_IS_LOST``) in an
  agent's or exporter's error text;
* ``nvidia-smi -q`` memory health: volatile uncorrectable ECC counts above zero (errors), and
  lifetime counts, rows or pages pending remap/retirement, a failed remap (warnings, a remap
  failure an error). The section a field belongs to (``Volatile``, ``Aggregate``, ``Retired
  Pages``, ``Remapped Rows``) is the last section header above it.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.kernel.common import event, has, norm_pci

from toranalyze.parser_api import file_key

_HANDLE = (
    r"Unable to (?:determine|detect) the device handle for GPU ?(?P<pci>[0-9A-Fa-f]{3,8}:[0-9A-Fa-f]{2}:"
    r"[0-9A-Fa-f]{2}\.[0-9])?:? ?(?P<why>.*)$|nvmlDeviceGetHandle\w*\(\): (?P<why2>.+)$"
)
# An agent's summary; the driver's 'NVRM: Xid (PCI:...): N' line is the gpu parser's.
_XID_SUMMARY = (
    r"\bXID (?P<code>[0-9]+)(?:\.[0-9]+)?\s*\((?P<what>[^)]*)\).*?\bdetected on (?:GPU )?(?:PCI:)?"
    r"(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})"
)
_GPU_LOST = r"\b(?:NVML_)?ERROR_GPU_IS_LOST\b"
_DCGM_ROW = r"^\|\s*(?P<test>[A-Za-z][\w /-]*?)?\s*\|\s*(?P<res>Pass|Fail|Warn|Skip)\w* - GPU:\s*(?P<gpu>[0-9]+)"
_IBPANIC = r"ibpanic: .*stat of IB device '(?P<dev>[\w\-]+)' failed"

FRAGMENTS = ("XID ", "GPU_IS_LOST", "device handle", "nvmlDeviceGetHandle", "ERR!", " - GPU:", "ibpanic",
             "Uncorrectable", "Pending", "Remapping Failure", "Double Bit", "Volatile", "Aggregate", "Retired Pages",
             "Remapped Rows")
_SECTION = r"^\s*(Volatile|Aggregate|Retired Pages|Remapped Rows|Double Bit|Single Bit)\s*$"
_MEM_FIELD = (
    r"^\s*(?P<field>(?:DRAM|SRAM) Uncorrectable|Device Memory|Total|Uncorrectable Error|Double Bit ECC"
    r"|Pending Page Blacklist|Pending Page Retirement|Pending|Remapping Failure Occurred)\s*:\s*(?P<val>\S+)\s*$"
)


def tool_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    body = pl.col("body")
    h = body.str.extract_groups(_HANDLE)
    handle = (
        lf.filter(has("device handle", "nvmlDeviceGetHandle"))
        .with_columns(h.alias("_h"))
        .filter(pl.col("_h").struct.field("why").is_not_null() | pl.col("_h").struct.field("why2").is_not_null())
        .select(event("error", "error", device=norm_pci(pl.col("_h").struct.field("pci"))))
    )
    # ERR! in a field (power, fan) is often a transient read failure: kept as an unclassified warning.
    err = lf.filter(has("ERR!") & body.str.starts_with("|")).select(
        event("warning", "warning", message=pl.format("nvidia-smi shows ERR! for a GPU: {}", body.str.strip_chars()))
    )
    d = body.str.extract_groups(_DCGM_ROW)
    test = pl.col("_d").struct.field("test").replace("", None).forward_fill().over(file_key())
    dcgm = (
        lf.filter(body.str.starts_with("|"))
        .with_columns(d.alias("_d"))
        .with_columns(test.alias("_test"))
        .filter(pl.col("_d").struct.field("res") == "Fail")
        .select(
            event(
                "error",
                "error",
                # A pasted fragment may start below the row naming the test.
                message=pl.format(
                    "dcgmi diag: {}Fail on GPU {}",
                    (pl.col("_test") + " ").fill_null(""),
                    pl.col("_d").struct.field("gpu"),
                ),
                gpu=pl.col("_d").struct.field("gpu").cast(pl.Int32, strict=False),
            )
        )
    )
    ib = (
        lf.filter(has("ibpanic"))
        .with_columns(body.str.extract(_IBPANIC, 1).alias("_dev"))
        .filter(pl.col("_dev").is_not_null())
        .select(event("error", "error", message=pl.format("ibstat: IB device {} is missing ({})", "_dev", body)))
    )
    x = body.str.extract_groups(_XID_SUMMARY)
    summary = (
        lf.filter(has("XID ") & ~has("NVRM: Xid"))
        .with_columns(x.alias("_xs"))
        .filter(pl.col("_xs").struct.field("code").is_not_null())
        .select(
            event(
                "error",
                "error",
                message=pl.format("Xid {} reported by a GPU health agent: {}", pl.col("_xs").struct.field("code"),
                                  body.str.strip_chars()),
                code=pl.col("_xs").struct.field("code"),
                device=norm_pci(pl.col("_xs").struct.field("pci")),
            )
        )
    )
    lost = lf.filter(has("GPU_IS_LOST") & body.str.contains(_GPU_LOST)).select(
        event("error", "error", message=pl.format("NVML: the GPU is lost ({})", body.str.strip_chars()))
    )
    return pl.concat([handle, err, dcgm, ib, summary, lost, _smi_memory(lf)], how="diagonal_relaxed")


def _smi_memory(lf: pl.LazyFrame) -> pl.LazyFrame:
    """nvidia-smi -q memory-health fields that report a problem (zero counts and 'No' are health)."""
    body = pl.col("body")
    f = body.str.extract_groups(_MEM_FIELD)
    field, val = pl.col("_f").struct.field("field"), pl.col("_f").struct.field("val")
    section = pl.col("_sec")
    count = val.cast(pl.Int64, strict=False)
    bad = (count > 0) | (val == "Yes")
    uncorrectable = field.str.contains("Uncorrectable|Device Memory|Total|Double Bit")
    # Remapped Rows' own 'Uncorrectable Error' is a lifetime count: a warning like Aggregate ones.
    volatile = (section == "Volatile") & uncorrectable & (field != "Uncorrectable Error")
    failed = field == "Remapping Failure Occurred"
    pending = field.str.starts_with("Pending")
    level = pl.when(volatile | failed).then(pl.lit("error")).otherwise(pl.lit("warning"))
    where = pl.when(section.is_not_null()).then(pl.format(" ({})", section)).otherwise(pl.lit(""))
    return (
        lf.with_columns(body.str.extract(_SECTION, 1).forward_fill().over(file_key()).alias("_sec"), f.alias("_f"))
        .filter(field.is_not_null() & bad & (uncorrectable | failed | pending))
        .select(event(level, level, message=pl.format("nvidia-smi -q: {}{}: {}", field, where, val)))
    )
