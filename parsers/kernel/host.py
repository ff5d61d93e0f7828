"""Host hardware: EDAC, machine checks, APEI/GHES, PCIe AER/DPC/hotplug, IPMI SEL, boots.

Corrected errors (EDAC CE, AER Corrected, GHES ``corrected``, ``Machine check events logged``)
are ``warning`` rows; uncorrected ones are ``error`` (``critical`` when fatal). Whether a row
gets a failure class is the rules' decision (toranalyze/rules/kernel.toml).
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.kernel.common import PCI, event, has, norm_pci, runs

from toranalyze.parser_api import NAIVE_US

_EDAC = r"\bEDAC (?:\w+ )?MC[0-9]+: (?P<n>[0-9]+) (?P<kind>CE|UE) "
_AER = (
    r"(?:AER|pcie[0-9]+): (?P<multi>Multiple )?(?P<sev>Corrected|Uncorrect(?:ed|able) \((?:Non-)?Fatal\)) "
    rf"error(?: message)? received(?::| from) ?(?:id=\w+|(?P<src>{PCI}))?"
)
_REPORTER = rf"^[\w\-]+ (?P<pci>{PCI}): "
_GHES = r"^\{(?P<id>[0-9]+)\}\[Hardware Error\]:\s*(?P<text>.*)$"
_GHES_KEEP = r"^(?:Hardware error from|event severity|section[_ ]type|error_type|device_id|DIMM location|fru_text)"


def _level(kind: pl.Expr, critical: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(kind, severity) for a row that is an error when ``kind`` and critical when also ``critical``."""
    k = pl.when(kind).then(pl.lit("error")).otherwise(pl.lit("warning"))
    s = pl.when(kind & critical).then(pl.lit("critical")).when(kind).then(pl.lit("error")).otherwise(pl.lit("warning"))
    return k, s


def memory_cpu_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """EDAC memory-controller counts, MCE notices, AMD MCE decoder lines, memory-failure handling."""
    body = pl.col("body")
    edac = body.str.extract_groups(_EDAC)
    ue = edac.struct.field("kind") == "UE"
    logged = body.str.contains("Machine check events logged", literal=True)
    mce_fatal = body.str.contains(r"Machine Check Exception|Uncorrected hardware memory error|Fatal machine check")
    amd_ue = body.str.contains(r"^\[Hardware Error\]: Uncorrected, ")
    amd_ce = body.str.contains(r"^\[Hardware Error\]: Corrected error, no action required")
    mem_failure = body.str.contains(r"^Memory failure: 0x[0-9a-f]+: ")
    thermal = body.str.contains(r"(?:Core|Package) temperature above threshold, cpu clock throttled")
    fragments = ("EDAC", "Machine", "Hardware Error", "Memory failure", "temperature above", "hardware memory error")
    h = lf.filter(has(*fragments)).with_columns(
        edac.struct.field("kind").is_not_null().alias("_edac"),
        ue.fill_null(False).alias("_ue"),
        logged.alias("_logged"),
        mce_fatal.alias("_mce"),
        amd_ue.alias("_amd_ue"),
        amd_ce.alias("_amd_ce"),
        mem_failure.alias("_mf"),
        thermal.alias("_thermal"),
    )
    kind, sev = _level(pl.col("_ue"), pl.lit(True))
    return pl.concat(
        [
            h.filter("_edac").select(event(kind, sev)),
            h.filter(pl.col("_logged") | pl.col("_amd_ce") | pl.col("_thermal")).select(event("warning", "warning")),
            h.filter("_mce").select(event("error", "critical")),
            h.filter(pl.col("_amd_ue") | pl.col("_mf")).select(event("error", "error")),
        ],
        how="diagonal_relaxed",
    )


def ghes_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Firmware-first (APEI/GHES) records: consecutive ``{N}[Hardware Error]:`` lines with one N,
    one event whose message keeps the source, severity, section and error type."""
    g = pl.col("body").str.extract_groups(_GHES)
    s = lf.filter(has("[Hardware Error]")).with_columns(
        g.struct.field("id").alias("_id"), g.struct.field("text").str.strip_chars().alias("_t")
    )
    same = (pl.col("_id") == pl.col("_id").shift(1)) & (pl.col("line") - pl.col("line").shift(1) == 1)
    start = pl.col("_id").is_not_null() & ~same.fill_null(False)
    recs = (
        s.with_columns(runs(start, pl.col("_id").is_not_null()).alias("_rec"))
        .filter(pl.col("_rec").is_not_null())
        .group_by("_rec")
        .agg(
            pl.col("line").min(),
            pl.col("line").max().alias("_last"),
            pl.col("_t").filter(pl.col("_t").str.contains(_GHES_KEEP)).str.join("; ").alias("_keep"),
            pl.col("_t").str.extract(r"^event severity: (\w+)", 1).drop_nulls().first().alias("_sev"),
            pl.col("_t").str.extract(rf"device_id: ({PCI})", 1).drop_nulls().first().alias("_pci"),
            pl.col("_id").first(),
        )
    )
    sev = pl.col("_sev").str.to_lowercase()
    kind = (
        pl.when(sev.is_in(["fatal", "recoverable"]))
        .then(pl.lit("error"))
        .when(sev == "corrected")
        .then(pl.lit("warning"))
        .otherwise(pl.lit("info"))
    )
    severity = pl.when(sev == "fatal").then(pl.lit("critical")).otherwise(kind)
    return recs.select(
        event(
            kind,
            severity,
            message=pl.concat_str([pl.lit("{"), pl.col("_id"), pl.lit("}[Hardware Error]: "), pl.col("_keep")]),
            device=norm_pci(pl.col("_pci")),
            line_end=pl.when(pl.col("_last") > pl.col("line")).then(pl.col("_last")),
        )
    )


def pcie_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """PCIe AER error notices, DPC containment and hotplug slot link changes.

    ``device`` is the device that reported the error (``received: 0000:3b:00.0``), else the port.
    """
    body = pl.col("body")
    aer = body.str.extract_groups(_AER)
    reporter = body.str.extract(_REPORTER, 1)
    sev = aer.struct.field("sev")
    hp = body.str.extract_groups(
        r"pciehp: Slot\((?P<slot>[^)]+)\): (?P<ev>Link Down|Card not present|Link Up|Card present)"
    )
    p = lf.filter(has("AER", "DPC", "pciehp", "pcie")).with_columns(
        aer.alias("_aer"),
        norm_pci(pl.coalesce(aer.struct.field("src"), reporter)).alias("_dev"),
        norm_pci(reporter).alias("_port"),
        hp.struct.field("ev").alias("_hp"),
        body.str.contains(r"AER: device recovery failed").alias("_failed"),
        body.str.contains(r"DPC: containment event").alias("_dpc"),
    )
    uncorrected = sev.str.starts_with("Uncorrect")
    fatal = sev.str.contains(r"\(Fatal\)")
    kind, severity = _level(uncorrected.fill_null(False), fatal.fill_null(False))
    down = pl.col("_hp").is_in(["Link Down", "Card not present"])
    return pl.concat(
        [
            p.filter(sev.is_not_null()).select(event(kind, severity, device=pl.col("_dev"))),
            p.filter(pl.col("_failed") | pl.col("_dpc")).select(event("error", "error", device=pl.col("_port"))),
            p.filter(pl.col("_hp").is_not_null()).select(
                event(
                    pl.when(down).then(pl.lit("error")).otherwise(pl.lit("info")),
                    pl.when(down).then(pl.lit("error")).otherwise(pl.lit("info")),
                    device=pl.col("_port"),
                    state=pl.when(down).then(pl.lit("DOWN")).otherwise(pl.lit("UP")),
                )
            ),
        ],
        how="diagonal_relaxed",
    )


_SEL = (
    r"^\s*[0-9a-fA-F]+ \| (?P<date>[0-9]{2}/[0-9]{2}/[0-9]{4}) \| "
    r"(?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})(?: [A-Z]{2,5})? \| "
    r"(?P<sensor>[^|]+?) \| (?P<ev>[^|]+?) \| (?P<dir>Asserted|Deasserted)\b"
)
_SEL_FAILURE = (
    r"(?i)fail|lost|uncorrectable|IERR|fatal|thermal trip|non-recoverable|SERR|PERR|lower critical|upper critical"
)
_SEL_WARNING = r"(?i)correctable|non-critical|predictive|degraded|throttl|warning"


def sel_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """``ipmitool sel elist`` rows: ``1 | 03/01/2024 | 12:00:00 | Power Supply PSU1 | Failure detected | Asserted``.

    The BMC's clock is written as is (no zone). The message reads ``SEL: sensor | event | direction``.
    """
    g = pl.col("body").str.extract_groups(_SEL)
    s = (
        lf.filter(has("Asserted", "Deasserted"))
        .with_columns(g.alias("_g"))
        .filter(pl.col("_g").struct.field("dir").is_not_null())
    )
    f = pl.col("_g").struct
    asserted = f.field("dir") == "Asserted"
    failure = asserted & f.field("ev").str.contains(_SEL_FAILURE)
    warning = asserted & f.field("ev").str.contains(_SEL_WARNING)
    level = pl.when(failure).then(pl.lit("error")).when(warning).then(pl.lit("warning")).otherwise(pl.lit("info"))
    ts = pl.format("{} {}", f.field("date"), f.field("time")).str.strptime(NAIVE_US, "%m/%d/%Y %H:%M:%S", strict=False)
    return s.select(
        event(
            level,
            level,
            message=pl.format("SEL: {} | {} | {}", f.field("sensor"), f.field("ev"), f.field("dir")),
            ts=ts,
        )
    )


def boot_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """A node (re)booted (``Linux version …`` banner) or is going down (``reboot: …``)."""
    body = pl.col("body")
    b = lf.filter(has("Linux version ", "reboot: "))
    return pl.concat(
        [
            b.filter(body.str.contains(r"^Linux version [0-9]")).select(event("node_state", "info", state="BOOT")),
            b.filter(body.str.contains(r"^reboot: (?:Restarting system|Power down)")).select(
                event("node_state", "info", state=pl.lit("REBOOT"))
            ),
        ],
        how="diagonal_relaxed",
    )


NOISE = (
    r"\bEDAC (?:\w+ )?MC[0-9]*: ",
    r"\bEDAC \w+: ",
    r"mce: \[Hardware Error\]: (?:CPU [0-9]+: Machine Check: |TSC |PROCESSOR |RIP |Run the above through|Some CPUs)",
    r"\[Hardware Error\]: (?:CPU:[0-9]+ |Error Addr|IPID|cache level|Syndrome|PPIN|MC[0-9]+_STATUS"
    r"|Corrected error, no action)",
    r"\bAER: |PCIe Bus Error: severity=|error status/mask=|:\s+\[\s*[0-9]+\] [A-Z][A-Za-z]+",
    r"\bDPC: ",
    r"(?:Core|Package) temperature/speed normal",
)
