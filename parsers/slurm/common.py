"""Expressions shared by the Slurm line rules and the sacct table reader."""

from __future__ import annotations

import polars as pl

# A job id as Slurm prints it: plain, array task (123_4, 123_[1-5%1], 123_*), het component (123+0).
JOB_ID = r"[0-9]+(?:_(?:[0-9]+|\[[^\]\s]*\]|\*)|\+[0-9]+)?"

# Job states as sacct prints them. A cut cell ('OUT_OF_ME+') resolves to the first state
# here it is a prefix of, so the commoner of two candidates comes first (COMPLETED).
STATES: tuple[str, ...] = (
    "OUT_OF_MEMORY",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "SPECIAL_EXIT",
    "COMPLETED",
    "COMPLETING",
    "BOOT_FAIL",
    "CANCELLED",
    "NODE_FAIL",
    "PREEMPTED",
    "SUSPENDED",
    "RESV_DEL_HOLD",
    "REVOKED",
    "DEADLINE",
    "REQUEUED",
    "RESIZING",
    "STOPPED",
    "RUNNING",
    "PENDING",
    "TIMEOUT",
    "FAILED",
)

# States after which a job (or step) no longer runs.
TERMINAL: tuple[str, ...] = (
    "OUT_OF_MEMORY", "BOOT_FAIL", "CANCELLED", "COMPLETED", "NODE_FAIL", "PREEMPTED",
    "REVOKED", "DEADLINE", "REQUEUED", "TIMEOUT", "FAILED", "SPECIAL_EXIT", "REQUEUE_HOLD", "REQUEUE_FED",
)

# slurmstepd banner reason -> the state sacct records for the job.
REASON_STATE: dict[str, str] = {
    "TIME LIMIT": "TIMEOUT",
    "PREEMPTION": "PREEMPTED",
    "NODE FAILURE": "NODE_FAIL",
    "JOB REQUEUE": "REQUEUED",
    "TASK FAILURE": "FAILED",
    "UNCORRECTABLE MEMORY ERROR": "FAILED",
}

# strsignal() names that srun prints for a task killed by a signal.
SIGNALS: dict[str, int] = {
    "Hangup": 1,
    "Interrupt": 2,
    "Quit": 3,
    "Illegal instruction": 4,
    "Trace/breakpoint trap": 5,
    "Aborted": 6,
    "Bus error": 7,
    "Floating point exception": 8,
    "Killed": 9,
    "User defined signal 1": 10,
    "Segmentation fault": 11,
    "User defined signal 2": 12,
    "Broken pipe": 13,
    "Alarm clock": 14,
    "Terminated": 15,
}


def normalize_state(cell: pl.Expr) -> pl.Expr:
    """'CANCELLED by 1234' -> CANCELLED, 'OUT_OF_ME+' -> OUT_OF_MEMORY; unknown words stay upper-cased."""
    word = cell.str.strip_chars().str.extract(r"^([A-Za-z_]+)", 1).str.to_uppercase()
    truncated = cell.str.strip_chars().str.contains(r"^[A-Za-z_]+\+$")
    resolved: pl.Expr = word
    for state in reversed(STATES):
        resolved = pl.when(truncated & pl.lit(state).str.starts_with(word)).then(pl.lit(state)).otherwise(resolved)
    return pl.when(word.is_in(STATES)).then(word).otherwise(resolved)


def state_severity(state: pl.Expr) -> pl.Expr:
    """Severity of a job_end by its state: planned stops warn, failures are errors."""
    return (
        pl.when(state.is_in(["COMPLETED", "RUNNING", "PENDING", "COMPLETING", "RESIZING"]))
        .then(pl.lit("info"))
        .when(state.is_in(["CANCELLED", "TIMEOUT", "PREEMPTED", "REQUEUED", "SUSPENDED", "STOPPED",
                           "REQUEUE_HOLD", "REQUEUE_FED", "REVOKED", "DEADLINE"]))
        .then(pl.lit("warning"))
        .otherwise(pl.lit("error"))
    )


def hostlist_count(hosts: pl.Expr) -> pl.Expr:
    """Number of hosts in a Slurm hostlist ('gpu[01-34,36-49],cpu7' -> 49); null for 'None assigned'.

    Each top-level item counts once; each comma inside brackets adds one; each
    range 'a-b' inside brackets adds b-a.
    """
    h = hosts.str.strip_chars()
    inside = h.str.extract_all(r"\[[^\]]*\]").list.join("")
    top = h.str.replace_all(r"\[[^\]]*\]", "")
    spans = (
        inside.str.extract_all(r"[0-9]+-[0-9]+")
        .list.eval(
            pl.element().str.extract(r"-([0-9]+)$", 1).cast(pl.Int64, strict=False)
            - pl.element().str.extract(r"^([0-9]+)", 1).cast(pl.Int64, strict=False)
        )
        .list.sum()
    )
    n = top.str.count_matches(",") + 1 + inside.str.count_matches(",") + spans.fill_null(0)
    valid = h.str.contains(r"^[\w.\-\[\],]+$") & ~h.str.to_lowercase().is_in(["none", "(null)", "unknown"])
    return pl.when(valid).then(n).otherwise(None).cast(pl.Int32, strict=False)


def single_host(hosts: pl.Expr) -> pl.Expr:
    """The host name when a hostlist names exactly one host ('node[07]' -> 'node07'), else null."""
    h = hosts.str.strip_chars()
    one = h.str.replace(r"^([\w.\-]+)\[([0-9]+)\]$", "${1}${2}")
    return pl.when(hostlist_count(h) == 1).then(one).otherwise(None)


def elapsed_seconds(cell: pl.Expr) -> pl.Expr:
    """Slurm durations '[D-][HH:]MM:SS[.mmm]' -> seconds (Float64)."""
    g = cell.str.strip_chars().str.extract_groups(r"^(?:([0-9]+)-)?(?:([0-9]+):)?([0-9]+):([0-9]+(?:\.[0-9]+)?)$")
    days = g.struct.field("1").cast(pl.Float64, strict=False).fill_null(0.0)
    hours = g.struct.field("2").cast(pl.Float64, strict=False).fill_null(0.0)
    minutes = g.struct.field("3").cast(pl.Float64, strict=False)
    seconds = g.struct.field("4").cast(pl.Float64, strict=False)
    # 'D-HH' without minutes is not printed by Slurm for elapsed times; keep the common forms only.
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def base_job_id(job: pl.Expr) -> pl.Expr:
    """The job without its step: '123.batch' -> '123', '123_4.0' -> '123_4', '123+0.1' -> '123+0'.

    A pending array ('123_[1-3%1]', '123_*') is the array job '123'; a trailing '+' of a cut cell is dropped.
    """
    jid = job.str.strip_chars().str.extract(rf"^({JOB_ID})", 1)
    return jid.str.replace(r"_(?:\[.*\]|\*)$", "")
