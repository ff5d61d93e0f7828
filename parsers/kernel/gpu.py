"""NVIDIA GPU and NVSwitch records: NVRM Xid and friends, SXid, fabric manager, GPU index maps.

``code`` holds the Xid number (``79``); NVSwitch errors use ``SX`` + the SXid number
(``SX12028``), both from the driver's SXid lines and the fabric manager's
``detected NVSwitch fatal error N`` lines, so rules can tell the two families apart.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.kernel.common import PCI, boot_id, event, first_of_burst, has, norm_pci, runs

from toranalyze.parser_api import file_key

# The address may be redacted in a pasted log ('Xid (PCI:...): 145'): the record stands, no device.
_XID = (
    rf"NVRM: Xid \((?:PCI:)?(?:(?P<pci>{PCI})|[^)\s]*)\): (?P<code>[0-9]+)"
    r"(?:, pid=(?P<pid>[^,]*))?(?:, name=(?P<name>[^,]*))?(?:,\s*(?P<text>.*))?"
)
# Xids that stop the GPU (or the node) and Xids that record a condition without stopping work.
_XID_CRITICAL = ["48", "62", "64", "74", "79", "95", "119", "120", "140", "154"]
_XID_WARNING = ["45", "63", "92"]

_FALLEN = r"(?i)f(?:a|e)ll(?:en)? off the bus"


def xid_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """``NVRM: Xid (PCI:0000:3b:00): 79, pid=…, name=…, GPU has fallen off the bus.``

    Xid 45 only says the driver tore down channels after another error (or after a kill). When
    the driver does not print ``caused by previous Xid N``, the message gets
    ``(follows Xid N on this GPU)`` naming the last other Xid of the same device since boot,
    so rules can classify the symptom by its cause and leave a lone 45 unclassified.
    """
    g = pl.col("body").str.extract_groups(_XID)
    hits = lf.with_columns(boot_id().alias("_boot")).filter(has("NVRM: Xid")).with_columns(g.alias("_x")).filter(
        pl.col("_x").struct.field("code").is_not_null()
    )
    code = pl.col("_x").struct.field("code")
    device = norm_pci(pl.col("_x").struct.field("pci"))
    prev = (
        pl.when(code != "45")
        .then(code)
        .shift(1)
        .forward_fill()
        .over(["_boot", "_device"], order_by="line")
    )
    uncaused_45 = (code == "45") & ~pl.col("body").str.contains("caused by previous Xid", literal=True)
    note = pl.when(uncaused_45).then(pl.format(" (follows Xid {} on this GPU)", prev))
    text = pl.col("body").str.to_lowercase()
    severity = (
        pl.when(code.is_in(_XID_CRITICAL) | text.str.contains(r"\bfatal\b"))
        .then(pl.lit("critical"))
        .when(code.is_in(_XID_WARNING) | text.str.contains(r"non-?fatal"))
        .then(pl.lit("warning"))
        .otherwise(pl.lit("error"))
    )
    lone_45 = uncaused_45 & prev.is_null()
    # Xid 154 reports the recovery action; a change back to 'None' means the GPU is fine again.
    recovered = (code == "154") & pl.col("body").str.contains(r"to 0x0 \(None\)")
    return hits.with_columns(device.alias("_device")).select(
        event(
            pl.when(recovered).then(pl.lit("info")).when(lone_45).then(pl.lit("warning")).otherwise(pl.lit("error")),
            pl.when(recovered).then(pl.lit("info")).otherwise(severity),
            message=pl.concat_str([pl.col("msg"), note.fill_null("")]),
            code=code,
            device=pl.col("_device"),
        )
    )


_GSP_TIMEOUT = (
    r"(?i)timeout waiting for rpc|gsp rpc timeout|rpc response from gpu[0-9]+ gsp"
    r"|_kgspIsHeartbeatTimedOut|gsp rm heartbeat timed out|_kgspLogRpcTimeout"
)


def _fallen_off_the_bus(body: pl.Expr, no_xid: pl.Expr) -> list[pl.Expr]:
    """_fallen (one-line record), _split (the first line of a record split over up to three lines),
    _end (its last line) and _joined (its message, the lines joined)."""
    # 'NVRM: GPU 0000:05:00.0: GPU has fallen off the bus.' / 'NVRM: GPU at 0000:01:00.0 has fallen ...'
    fallen = no_xid & body.str.contains(_FALLEN) & body.str.contains(rf"NVRM: GPU (?:at )?(?:PCI:)?{PCI}")
    # Newer drivers split it: 'NVRM: The NVIDIA GPU 0000:b3:00.0' / '(PCI ID: …) installed in this
    # system has' / 'fallen off the bus and is not responding to commands.'
    the_gpu = body.str.contains(rf"NVRM: The NVIDIA GPU {PCI}")
    nxt1, nxt2 = body.shift(-1), body.shift(-2)
    line1, line2 = pl.col("line").shift(-1), pl.col("line").shift(-2)
    end = (
        pl.when(nxt1.str.contains(_FALLEN) & (line1 - pl.col("line") <= 2))
        .then(line1)
        .when(nxt2.str.contains(_FALLEN) & (line2 - pl.col("line") <= 2))
        .then(line2)
    )
    joined = pl.concat_str(
        [pl.col("msg"), nxt1.str.strip_chars(), pl.when(end == line2).then(nxt2.str.strip_chars())],
        separator=" ",
        ignore_nulls=True,
    )
    return [
        fallen.alias("_fallen"),
        (the_gpu & end.is_not_null()).alias("_split"),
        end.alias("_end"),
        joined.alias("_joined"),
    ]


def _gsp_records(body: pl.Expr, no_xid: pl.Expr) -> list[pl.Expr]:
    """_gsp (the first GSP timeout of a burst), _banner (an Xid banner with no Xid record after it)
    and _banner_code (its Xid number)."""
    # The GSP firmware stops answering: an RPC times out, or (newer drivers, before any Xid) its
    # heartbeat does: '_kgspIsHeartbeatTimedOut: Heartbeat timed out', '_kgspLogRpcTimeout: ** GSP Timeout'.
    gsp_timeout = no_xid & body.str.contains(_GSP_TIMEOUT)
    # '_kgspLogXid119: ****** GSP Timeout ******' heads an Xid 119 record; alone it is the only trace.
    banner_code = body.str.extract(r"_kgspLogXid([0-9]+): \*+ ", 1)
    xid_line = pl.when(body.str.contains(r"NVRM: Xid \(")).then(pl.col("line")).backward_fill()
    banner = banner_code.is_not_null() & ((xid_line - pl.col("line")).fill_null(99) > 10)
    return [first_of_burst(gsp_timeout, 100).alias("_gsp"), banner.alias("_banner"), banner_code.alias("_banner_code")]


def _notices(body: pl.Expr) -> list[pl.Expr]:
    """_probe, _dump, _loaded (driver notices) and _uuid (a GPU's UUID, from the line naming its PCI address)."""
    at_pci = body.str.extract_groups(rf"NVRM: GPU at (?:PCI:)?(?P<pci>{PCI}): (?P<uuid>GPU-[0-9a-fA-F\-]+)")
    return [
        body.str.contains("NVRM: The NVIDIA probe routine failed", literal=True).alias("_probe"),
        body.str.contains("NVRM: A GPU crash dump has been created", literal=True).alias("_dump"),
        body.str.contains(r"NVRM: loading NVIDIA UNIX .*Kernel Module").alias("_loaded"),
        at_pci.struct.field("uuid").alias("_uuid"),
    ]


def nvrm_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """NVRM lines without an Xid number that still matter."""
    body = pl.col("body")
    no_xid = ~body.str.contains("NVRM: Xid", literal=True)
    reset = body.str.contains(r"\[NV_ERR_(?:RESET_REQUIRED|GPU_IS_LOST)\]")
    nv = lf.filter(has("NVRM")).with_columns(
        *_fallen_off_the_bus(body, no_xid),
        norm_pci(body.str.extract(rf"({PCI})", 1)).alias("_pci"),
        first_of_burst(reset, 100).alias("_reset"),
        *_gsp_records(body, no_xid),
        *_notices(body),
    )
    frames = [
        nv.filter("_fallen").select(event("error", "critical", device=pl.col("_pci"))),
        nv.filter("_split").select(
            event("error", "critical", message=pl.col("_joined"), device=pl.col("_pci"), line_end=pl.col("_end"))
        ),
        nv.filter("_reset").select(event("error", "critical")),
        nv.filter("_gsp").select(event("error", "critical", device=pl.col("_pci"))),
        nv.filter("_banner").select(event("error", "critical", code=pl.col("_banner_code"))),
        nv.filter("_probe").select(event("warning", "warning")),
        nv.filter("_dump").select(event("warning", "warning")),
        nv.filter("_loaded").select(event("info", "info")),
        nv.filter(pl.col("_uuid").is_not_null()).select(
            event("info", "info", device=pl.col("_pci"), uuid=pl.col("_uuid"))
        ),
    ]
    return pl.concat(frames, how="diagonal_relaxed")


# AMD's RAS handler names the GPU by its PCI address and the hardware event that stopped it:
# ``amdgpu 0000:1c:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!``.
_AMDGPU_UE = rf"amdgpu (?P<pci>{PCI}): (?:\{{[0-9]+\}})?uncorrectable hardware error\((?P<what>[^)]*)\) detected"


# The scheduler's job watchdog when a ring stops retiring work (the GPU hung; a reset follows):
# ``[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring sdma0 timeout, signaled seq=16060, emitted seq=16062``
# or, in newer kernels, ``amdgpu 0000:c5:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=…``.
_AMDGPU_RING = rf"(?:amdgpu (?P<pci>{PCI}): .*?)?\bring (?P<ring>\S+) timeout, signaled seq="

# The firmware scheduler of RDNA3 / MI300 parts (MES) stopped answering the driver, which gives up on it:
# ``amdgpu 0000:c5:00.0: amdgpu: MES might be in unrecoverable state, issue a GPU reset`` (after ``MES failed
# to respond to msg=REMOVE_QUEUE``; ``GPU reset begin!`` follows). One event per such verdict.
_AMDGPU_MES = rf"amdgpu (?P<pci>{PCI}): (?:amdgpu: )?MES might be in unrecoverable state"


def amdgpu_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """amdgpu RAS notices of an uncorrectable error, ring (job) timeouts and a hung MES: critical events."""
    body = pl.col("body")
    hits = lf.filter(has("amdgpu")).with_columns(
        body.str.extract_groups(_AMDGPU_UE).alias("_a"),
        body.str.extract_groups(_AMDGPU_RING).alias("_r"),
        body.str.extract(_AMDGPU_MES, 1).alias("_m"),
    )
    return pl.concat(
        [
            hits.filter(pl.col("_a").struct.field("pci").is_not_null()).select(
                event("error", "critical", device=norm_pci(pl.col("_a").struct.field("pci")))
            ),
            hits.filter(pl.col("_r").struct.field("ring").is_not_null()).select(
                event("error", "critical", device=norm_pci(pl.col("_r").struct.field("pci")))
            ),
            hits.filter(pl.col("_m").is_not_null()).select(event("error", "critical", device=norm_pci(pl.col("_m")))),
        ],
        how="diagonal_relaxed",
    )


_SMI_L = r"^GPU (?P<idx>[0-9]+): .+? \(UUID: (?P<uuid>GPU-[0-9a-fA-F\-]+)\)"
_SMI_ROW = (
    r"^\|\s+(?P<idx>[0-9]+)\s+.*?\|\s+(?P<pci>[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9])\s+(?:On|Off)\s+\|"
)


def smi_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """nvidia-smi lines that state a GPU index: ``GPU 0: … (UUID: GPU-…)`` and table rows
    ``|   0  NVIDIA H100 …  On  | 00000000:18:00.0 Off | …``. Kept as ``info`` rows; the parser
    uses them to map PCI addresses to GPU indices (see ``gpu_index_map``)."""
    body = pl.col("body")
    listed = body.str.extract_groups(_SMI_L)
    row = body.str.extract_groups(_SMI_ROW)
    hits = lf.filter(has("GPU ", "|")).with_columns(listed.alias("_l"), row.alias("_r"))
    return pl.concat(
        [
            hits.filter(pl.col("_l").struct.field("idx").is_not_null()).select(
                event(
                    "info",
                    "info",
                    gpu=pl.col("_l").struct.field("idx").cast(pl.Int32, strict=False),
                    uuid=pl.col("_l").struct.field("uuid"),
                )
            ),
            hits.filter(pl.col("_r").struct.field("idx").is_not_null()).select(
                event(
                    "info",
                    "info",
                    gpu=pl.col("_r").struct.field("idx").cast(pl.Int32, strict=False),
                    device=norm_pci(pl.col("_r").struct.field("pci")),
                )
            ),
        ],
        how="diagonal_relaxed",
    )


def gpu_index_map(events: pl.LazyFrame) -> pl.LazyFrame:
    """PCI address -> GPU index, from rows that state both or that share a GPU UUID.

    Addresses mapped to two different indices (a file spanning a re-enumeration) are dropped:
    a wrong index is worse than none. Each file of a batch has its own map (``_file``).
    """
    events = events.with_columns(file_key().alias("_file"))
    stated = pl.col("gpu").is_not_null() & pl.col("device").is_not_null()
    direct = events.filter(stated).select("_file", "device", "gpu")
    by_uuid = (
        events.filter(pl.col("uuid").is_not_null() & pl.col("device").is_not_null())
        .select("_file", "uuid", "device")
        .join(
            events.filter(pl.col("uuid").is_not_null() & pl.col("gpu").is_not_null()).select("_file", "uuid", "gpu"),
            on=["_file", "uuid"],
        )
        .select("_file", "device", "gpu")
    )
    both = pl.concat([direct, by_uuid]).unique()
    return both.filter(pl.len().over("_file", "device") == 1).rename({"gpu": "_gpu_map"})


_SXID = rf"SXid \((?:PCI:)?(?P<pci>{PCI})\): (?P<code>[0-9]+), (?P<rest>.*)$"


def sxid_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """NVSwitch driver errors, printed as a three-line record per error::

        nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt
        nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44 Sub-engine instance 00
        nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002c, …}

    One event per record; a ``Severity``/``Data`` line that does not follow its own record's line
    (a grep) stands alone.
    """
    s = lf.filter(_SXID_HAS).with_columns(_SXID_GROUPS).with_columns(_SXID_FIELDS).with_columns(_SXID_IS)
    recs = s.with_columns(_SXID_REC).filter(pl.col("_rec").is_not_null()).group_by("_rec").agg(_SXID_AGG)
    return recs.select(_SXID_EVENT)


# sxid_events' expressions, built once: building them cost more than running them on a small file.
_SXID_HAS = has("SXid")
_SXID_GROUPS = pl.col("body").str.extract_groups(_SXID).alias("_s")
_SXID_FIELDS = [
    pl.col("_s").struct.field("code").alias("_code"),
    norm_pci(pl.col("_s").struct.field("pci")).alias("_dev"),
    pl.col("_s").struct.field("rest").alias("_rest"),
]
_SXID_IS = pl.col("_code").is_not_null().alias("_is")


def _sxid_rec() -> pl.Expr:
    is_desc = pl.col("_rest").str.contains(r"^(?:Non-fatal|Fatal|Nonfatal)\b")
    same_as_prev = (
        pl.col("_is").shift(1).fill_null(False)
        & (pl.col("line").shift(1) == pl.col("line") - 1)
        & (pl.col("_code").shift(1) == pl.col("_code"))
        & (pl.col("_dev").shift(1) == pl.col("_dev"))
    ).fill_null(False)
    start = pl.col("_is") & (is_desc | ~same_as_prev)
    return runs(start, pl.col("_is") & ~is_desc).alias("_rec")


def _sxid_event() -> list[pl.Expr]:
    fatal = pl.col("_rest").str.starts_with("Fatal")
    nonfatal = pl.col("_rest").str.contains(r"^Non-?fatal")
    return event(
        pl.when(nonfatal).then(pl.lit("warning")).otherwise(pl.lit("error")),
        pl.when(fatal).then(pl.lit("critical")).when(nonfatal).then(pl.lit("warning")).otherwise(pl.lit("error")),
        message=pl.when(pl.col("_sev") != "")
        .then(pl.format("{} [{}]", pl.col("msg"), pl.col("_sev")))
        .otherwise(pl.col("msg")),
        code=pl.format("SX{}", pl.col("_code")),
        device=pl.col("_dev"),
        line_end=pl.when(pl.col("_last") > pl.col("line")).then(pl.col("_last")),
    )


_SXID_REC = _sxid_rec()
_SXID_AGG = [
    pl.col("line").min(),
    pl.col("line").max().alias("_last"),
    pl.col("_code").first(),
    pl.col("_dev").first(),
    pl.col("_rest").first(),
    pl.col("msg").first(),
    pl.col("_rest").filter(pl.col("_rest").str.starts_with("Severity ")).str.join("; ").alias("_sev"),
]
_SXID_EVENT = _sxid_event()


_FM_NVSWITCH = r"detected NVSwitch (?P<fatal>fatal|non-fatal) error (?P<code>[0-9]+) "
_FM_PCI = rf"pci bus id ({PCI})"
# 'Fabric Manager detected GPU NVL Fatal error on :' is followed by 'key : value' lines.
_FM_FIELD = r"^\s*[A-Za-z]\w* : \S+\s*$"


def fabric_manager_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """fabricmanager.log: ``[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error
    20034 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33``.

    ERROR and WARNING records become events (the message keeps the ``[ERROR] [tid N]`` tag so
    rules can recognise the fabric manager); INFO lines are noise.
    """
    lvl = pl.col("k_fm_lvl")
    g = pl.col("body").str.extract_groups(_FM_NVSWITCH)
    start = pl.col("k_fm") & lvl.is_in(["ERROR", "WARNING", "FATAL"])
    rec = runs(start, ~pl.col("k_fm") & pl.col("body").str.contains(_FM_FIELD))
    fm = lf.with_columns(rec.alias("_rec"), g.alias("_g")).filter(pl.col("_rec").is_not_null())
    recs = fm.group_by("_rec").agg(
        pl.col("line").min(),
        pl.col("line").max().alias("_last"),
        pl.col("k_fm_lvl").first().alias("_lvl"),
        pl.col("_g").first(),
        pl.col("body").first().str.extract(_FM_PCI, 1).alias("_pci"),
        pl.format("[{}] {}", pl.col("k_fm_lvl").first(), pl.col("body").first()).alias("_head"),
        pl.col("body").slice(1).str.strip_chars().str.join(", ").alias("_fields"),
    )
    fatal = pl.col("_g").struct.field("fatal")
    code = pl.col("_g").struct.field("code")
    kind = (
        pl.when((pl.col("_lvl") == "WARNING") | (fatal == "non-fatal"))
        .then(pl.lit("warning"))
        .otherwise(pl.lit("error"))
    )
    severity = (
        pl.when(fatal == "fatal")
        .then(pl.lit("critical"))
        .when(kind == "warning")
        .then(pl.lit("warning"))
        .otherwise(pl.lit("error"))
    )
    return recs.select(
        event(
            kind,
            severity,
            message=pl.when(pl.col("_fields") != "")
            .then(pl.format("{} {}", pl.col("_head"), pl.col("_fields")))
            .otherwise(pl.col("_head")),
            code=pl.when(code.is_not_null()).then(pl.format("SX{}", code)),
            device=norm_pci(pl.col("_pci")),
            line_end=pl.when(pl.col("_last") > pl.col("line")).then(pl.col("_last")),
        )
    )


NOISE = (
    r"NVRM: (?:nvidia-bug-report\.sh as root|the NVIDIA kernel module is unloaded)",
    r"NVRM: \(PCI ID: [0-9a-fA-F:]+\) installed in this system",
    r"NVRM: GPU Board Serial Number",
    r"NVRM: GPU [0-9a-fA-F:.]+: GPU serial number is",
    r"NVRM: _kgspLogXid[0-9]+:",
    r"NVRM: GPU[0-9]+ (?:GSP RPC buffer contains|RPC history|RPC event history|\s+entry|\s+-?[0-9]+\s)",
    r"NVRM: .*\[NV_ERR_\w+\]",
    r"NVRM: (?:GPU[0-9]+ )?(?:_issueRpcAndWait|rpcRmApi\w+_GSP|nvAssert\w*|nvCheck\w*|kflcnCoreDump\w*|_kgsp\w+):",
    r"nvidia-(?:uvm|modeset|nvlink|peermem|nvswitch[0-9]*): ",
    r"\[[A-Z][a-z]{2} [0-9]{1,2} [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\] \[(?:INFO|DEBUG)\] \[tid [0-9]+\]",
)
