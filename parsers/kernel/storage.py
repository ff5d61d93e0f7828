"""Storage: block-layer and NVMe errors, filesystem errors, NFS and Lustre client trouble.

I/O errors come in floods (one line per failed request); one event per burst keeps the table
readable, and the other lines of the burst are covered as noise. A server that stops answering
is ``error`` with ``state = "DOWN"`` and its recovery ``info`` with ``state = "UP"``.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.kernel.common import event, first_of_burst, has, noise_at_start

_BLOCK = (
    r"(?:I/O error|critical (?:medium|target|nexus|space allocation) error), dev [\w\-]+, sector [0-9]+"
    r"|Buffer I/O error on dev [\w\-]+"
    r"|^nvme[0-9]+n[0-9]+: I/O Cmd\(.*I/O Error"
)
_NVME = r"^nvme (?P<ctrl>nvme[0-9]+): (?P<what>.*)$"
_NVME_FATAL = r"controller is down; will reset|Removing after probe failure|Device not ready; aborting reset"
_NVME_RESET = r"QID [0-9]+ timeout, (?:reset controller|disable controller)"
_NVME_WARN = r"QID [0-9]+ timeout, (?:aborting|completion polled)"
_FS = (
    r"^EXT4-fs error \(device [^)]+\)"
    r"|^EXT4-fs \([^)]+\): (?:Remounting filesystem read-only|.*I/O error)"
    r"|^XFS \([^)]+\): (?:.*I/O [Ee]rror|.*[Cc]orruption|.*[Ss]hut(?:ting)? ?down)"
    r"|^Aborting journal on device|^JBD2: .*I/O? ?error|^BTRFS (?:error|critical) \(device"
)
_NFS = r"^nfs: server (?P<server>\S+) (?P<what>not responding, (?:still trying|timed out)|OK)"
_LUSTRE_LOST = r"^Lustre: .*Connection to \S+ \(at \S+\) was lost"
_LUSTRE_BACK = r"^Lustre: .*Connection restored to"
_LUSTRE_SLOW = r"^(?:Lustre|LNet): .*(?:Request sent has (?:timed out|failed due to network error)|Timed out tx for)"


# A literal every pattern above needs ('I/O error' or ' error, dev' for block errors, the
# subsystem's name for the rest): bare 'error', common in other kernel lines, runs nothing here.
FRAGMENTS = (
    "I/O error", "I/O Error", " error, dev", "nvme", "nfs", "Lustre", "LNet", "Aborting journal", "XFS", "EXT4-fs",
    "JBD2", "BTRFS",
)


def storage_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    body = pl.col("body")
    nvme = body.str.extract_groups(_NVME)
    what = nvme.struct.field("what")
    nfs = body.str.extract_groups(_NFS)
    lustre_error = body.str.starts_with("LustreError: ") & ~body.str.contains(r"Skipped [0-9]+ previous similar")
    s = lf.filter(has(*FRAGMENTS)).with_columns(
        first_of_burst(body.str.contains(_BLOCK), 50).alias("_block"),
        first_of_burst(body.str.contains(_FS), 50).alias("_fs"),
        what.str.contains(_NVME_FATAL).fill_null(False).alias("_nvme_fatal"),
        what.str.contains(_NVME_RESET).fill_null(False).alias("_nvme_reset"),
        what.str.contains(_NVME_WARN).fill_null(False).alias("_nvme_warn"),
        nfs.struct.field("what").alias("_nfs"),
        first_of_burst(lustre_error, 20).alias("_lerr"),
        body.str.contains(_LUSTRE_LOST).alias("_llost"),
        body.str.contains(_LUSTRE_BACK).alias("_lback"),
        body.str.contains(_LUSTRE_SLOW).alias("_lslow"),
    )
    nfs_ok = pl.col("_nfs") == "OK"
    return pl.concat(
        [
            s.filter(pl.col("_block") | pl.col("_fs") | pl.col("_nvme_reset") | pl.col("_lerr")).select(
                event("error", "error")
            ),
            s.filter("_nvme_fatal").select(event("error", "critical")),
            s.filter(pl.col("_nvme_warn") | pl.col("_lslow")).select(event("warning", "warning")),
            s.filter(pl.col("_nfs").is_not_null()).select(
                event(
                    pl.when(nfs_ok).then(pl.lit("info")).otherwise(pl.lit("error")),
                    pl.when(nfs_ok).then(pl.lit("info")).otherwise(pl.lit("error")),
                    state=pl.when(nfs_ok).then(pl.lit("UP")).otherwise(pl.lit("DOWN")),
                )
            ),
            s.filter("_llost").select(event("error", "error", state="DOWN")),
            s.filter("_lback").select(event("info", "info", state="UP")),
        ],
        how="diagonal_relaxed",
    )


NOISE = tuple(
    noise_at_start(p)
    for p in (
        _BLOCK,
        _FS,
        r"^nvme nvme[0-9]+: Abort status: 0x[0-9a-f]+",
        r"^(?:Lustre|LustreError|LNet): .*Skipped [0-9]+ previous similar messages?",
    )
)
