"""Incidents: one per interruption of an attempt, with phases, root cause, symptoms and evidence.

An attempt is **interrupted** when another attempt of the job follows it, or when it is the
last one and ended badly: a scheduler end that is not clean, or (no scheduler end at all) error
records after its last progress, or records (heartbeats) going on without progress for longer
than the hang threshold.

Evidence of an incident: classified records (``failure_class`` set) from every source of the
job in ``[max(attempt start, t_last_progress - pre_s), min(next attempt start, t_detected +
post_s)]``, plus the attempt's scheduler end state (NODE_FAIL, OUT_OF_MEMORY, TIMEOUT, ...).
The root cause is chosen on a ladder, each step stated in ``reason``:

1. error-level records of specific classes, lowest causal priority (``taxonomy.priority``)
   first, ties by time; a GPU class whose only records are the generic CUDA "unknown error"
   next to a node failure is that node failure; NaN losses stopped by a time limit, preemption
   or maintenance are that planned stop;
2. warnings of specific classes within ``pre_s`` of the last progress (confidence medium);
   warnings farther from it are background noise and dropped;
3. ``hang`` detectors, then collective timeouts with nothing else (``collective_timeout``);
4. planned stops; a walltime / user cancel after a silent stall longer than
   ``hang_stall_factor`` ideal steps (and ``hang_min_stall_s``) is a ``hang`` detected by the kill;
5. a clean exit followed by another attempt: a ``walltime`` (time-budget) interruption;
6. job-level termination records only (``WEAK_RULES``: exit codes, FAILED states): a kill
   signal after a long stall is a ``hang``, otherwise ``unknown``; nothing at all after a long
   stall is a ``hang``, else ``unknown`` (confidence low).

An OOM at start-up (before the attempt's first step) right after a GPU-hardware-class incident
on the same node is upgraded to that hardware class; alone it is kept with confidence medium.
The other classes are symptoms.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from toranalyze.ingest.classify import attribution_roles
from toranalyze.reconstruct.api import divided
from toranalyze.reconstruct.attribution import DEATH_CLASSES, KILL_RULES, LINK_RULES, PEER_SYMPTOM
from toranalyze.reconstruct.intervals import in_windows, min_after
from toranalyze.reconstruct.progress import CLEAN_STATES, is_clean
from toranalyze.reconstruct.stages import stage
from toranalyze.reconstruct.tables import INCIDENTS_SCHEMA
from toranalyze.taxonomy import PLANNED, TAXONOMY, priority

US = 1_000_000
# Planned stops of the whole job: no node is to blame.
JOB_WIDE = frozenset({"preemption", "walltime", "user_cancel", "scheduling"})


# The rows assembled per interruption before the derived columns: the table's own columns with
# times still as integer microseconds, plus the helpers the derived columns are computed from.
_ROWS_SCHEMA = pl.Schema(
    {
        **{
            name: (pl.Int64 if isinstance(dtype, pl.Datetime) else dtype)
            for name, dtype in INCIDENTS_SCHEMA.items()
            if name not in ("incident", "t_caught_up", "lost_steps", "lost_time_s", "downtime_s")
        },
        "last_step": pl.Int64,
        "next_resumed_from": pl.Int64,
        "job_end_us": pl.Int64,
    }
)

# Scheduler / pod end states that are evidence by themselves when no rule classified them.
STATE_CLASS = dict(attribution_roles().state_class)
CLEAN = CLEAN_STATES
NOT_STOP = ("fail_slow", "scheduling")
GPU_HW = ("gpu_hardware", "gpu_memory", "gpu_interconnect")
# Rules that only say the job (or a worker, a pod) ended badly: exit codes, FAILED states.
# They are the lowest rung of the causal ladder: a cause found anywhere else wins, and alone
# they give ``unknown``.
WEAK_RULES = attribution_roles().weak
# GPU-class rules that only repeat a generic CUDA failure text (no Xid, no ECC counter).
GENERIC_GPU_RULES = attribution_roles().generic_gpu
# Weak records that say the processes were killed from outside (SIGKILL/SIGTERM, a signal
# exception): after a silent stall that is how a hang ends.
SIGNAL_RULES = attribution_roles().signal
# Records of two files stamped this close may be in either order (second-resolution stamps).
SAME_MOMENT_US = 1_000_000
OOM = ("oom_gpu", "oom_host")
_PRIO = {name: priority(name) for name in TAXONOMY}
_PLANNED_OF = {name: bool(c.planned) for name, c in TAXONOMY.items()}
KEY = ["job", "attempt_idx"]


# Flags of an event computed from its message text (with_flags), so that the text itself need
# not travel through the stages: a peer's symptom, a scheduler job step's row, and the sequence
# number of the collective a watchdog timed out on (or the last one its rank enqueued).
FLAG_COLUMNS = ("peer_symptom", "sched_step_row", "collective_seq")
_SEQ = r"SeqNum=(\d+)|last enqueued (?:NCCL )?work: (\d+)"


def flag_defaults() -> list[pl.Expr]:
    """FLAG_COLUMNS of a record without a message."""
    return [pl.lit(False).alias("peer_symptom"), pl.lit(False).alias("sched_step_row"),
            pl.lit(None, pl.Int64).alias("collective_seq")]


def with_flags(ev: pl.DataFrame) -> pl.DataFrame:
    """Add FLAG_COLUMNS (kept when present)."""
    if all(c in ev.columns for c in FLAG_COLUMNS):
        return ev
    return ev.with_columns(flag_exprs())


def flag_exprs() -> list[pl.Expr]:
    """FLAG_COLUMNS from the columns message, kind, job_id and failure_class."""
    # A job step (``.batch``, ``.0``) ends CANCELLED whenever its job is stopped (time limit,
    # preemption, node failure): only the job's own row says who cancelled. Read on ends only
    # (the flag is used there), and peers' symptoms on network records only: the patterns skip
    # the rest of the text.
    msg = pl.col("message").fill_null("")
    end_msg = pl.when(pl.col("kind") == "job_end").then(msg)
    step_row = pl.col("job_id").fill_null("").str.contains(r"\.") | end_msg.str.contains(
        r"\bJobID=\S+\.(?:batch|extern|\d+)\b|\bStepName="
    )
    network = pl.col("failure_class") == "network"
    sym = network & pl.when(network).then(msg).str.contains(PEER_SYMPTOM)
    timeout = pl.when(pl.col("failure_class") == "collective_timeout").then(msg)
    seq = pl.coalesce(timeout.str.extract(_SEQ, 1), timeout.str.extract(_SEQ, 2)).cast(pl.Int64, strict=False)
    return [sym.fill_null(False).alias("peer_symptom"), step_row.fill_null(False).alias("sched_step_row"),
            seq.alias("collective_seq")]


def interrupted_attempts(att: pl.DataFrame, ev: pl.DataFrame, stall_us: dict[str, int] | None = None) -> pl.DataFrame:
    """Attempts that end by an interruption, with their next attempt's facts joined.

    The last attempt of a job counts when it ended badly (a scheduler end that is not clean),
    or, with no scheduler end, when error records follow its last progress or its records go on
    for longer than ``stall_us[job]`` without progress (a hang the logs end in)."""
    a = _with_next_attempt(att)
    errs_after = (
        ev.select("job", "attempt_idx", "failure_class", "t")
        .filter(pl.col("failure_class").is_not_null() & pl.col("t").is_not_null())
        .group_by("job", "attempt_idx")
        .agg(pl.col("t").max().alias("_t_last_err"))
    )
    a = a.join(errs_after, on=["job", "attempt_idx"], how="left")
    a = a.filter(~pl.col("is_last_attempt") | _ended_badly(stall_us))
    return a.drop("_t_last_err").sort("job", "attempt_idx")


def _with_next_attempt(att: pl.DataFrame) -> pl.DataFrame:
    """Attempts with ``is_last_attempt`` (the job's last), the next attempt's start (``t_restart``) and
    index, and the resume facts (``t_resumed``, ``next_resumed_from``) of the first later
    attempt that states them (none for the last attempt)."""
    a = att.sort("job", "attempt_idx").with_columns(
        (pl.col("attempt_idx") == pl.col("attempt_idx").max().over("job")).alias("is_last_attempt"),
        pl.col("t_start").shift(-1).over("job").alias("t_restart"),
        pl.col("attempt_idx").shift(-1).over("job").alias("next_attempt_idx"),
    )
    # Resume facts of the first later attempt that states them.
    nxt = a.select(
        "job",
        "attempt_idx",
        pl.col("resumed_from").alias("_rf"),
        pl.col("t_first_step_start").alias("_tr"),
    )
    a = a.with_columns(
        pl.col("resumed_from").shift(-1).over("job").alias("next_resumed_from"),
        pl.col("t_first_step_start")
        .shift(-1)
        .over("job")
        .alias("t_resumed"),
    )
    # When the next attempt never stepped, look further for the first that did.
    later = (
        nxt.filter(pl.col("_tr").is_not_null())
        .sort("job", "attempt_idx")
        .rename({"attempt_idx": "_la"})
    )
    a = a.with_columns((pl.col("attempt_idx") + 1).alias("_key")).sort("_key")
    return a.join_asof(
        later.sort("_la").select("job", "_la", pl.col("_tr").alias("_tr2"), pl.col("_rf").alias("_rf2")),
        left_on="_key",
        right_on="_la",
        by="job",
        strategy="forward", check_sortedness=False).with_columns(
        pl.when(pl.col("is_last_attempt")).then(None).otherwise(pl.coalesce("t_resumed", "_tr2")).alias("t_resumed"),
        pl.when(pl.col("is_last_attempt"))
        .then(None)
        .otherwise(pl.coalesce("next_resumed_from", "_rf2"))
        .alias("next_resumed_from"),
    ).drop("_key", "_la", "_tr2", "_rf2")


def _ended_badly(stall_us: dict[str, int] | None) -> pl.Expr:
    """Whether an attempt (the job's last) ended badly: a scheduler end that is not clean, or
    with no scheduler end error records (``_t_last_err``) after its last progress, or a stall
    longer than ``stall_us[job]``."""
    bad_end = pl.col("state").is_not_null() & ~is_clean(pl.col("state"))
    silent_end_with_errors = (
        pl.col("t_job_end").is_null()
        & pl.col("_t_last_err").is_not_null()
        & (pl.col("_t_last_err") >= pl.col("t_last_step_end").fill_null(pl.col("t_start")))
    )
    stalled = pl.lit(False)
    if stall_us:
        lim = pl.col("job").replace_strict(stall_us, default=None, return_dtype=pl.Int64)
        stalled = (
            pl.col("t_job_end").is_null()
            & pl.col("t_last_step_end").is_not_null()
            & (pl.col("t_end") - pl.col("t_last_step_end") > lim)
        ).fill_null(False)
    return bad_end | silent_end_with_errors | stalled


def _fmt(v: float) -> str:
    return f"{v:.0f} s" if v >= 10 else f"{v:.1f} s"


@dataclass(frozen=True)
class IncidentLimits:
    """The evidence window around an interruption and what a hang is (AnalysisOptions' incident_*
    and hang_* knobs)."""

    pre_s: float = 60.0
    post_s: float = 120.0
    hang_stall_factor: float = 10.0
    hang_min_stall_s: float = 120.0
    # file -> its clock's offset (µs) from the reference clock, for files whose clock is skewed
    # (reconstruct/skew.py): records are put in causal order on the corrected times.
    file_offsets_us: tuple[tuple[str, int], ...] = ()


def build_incidents(
    att: pl.DataFrame,
    ev: pl.DataFrame,
    steps: pl.DataFrame,
    ideal_us: dict[str, int],
    job_end_us: dict[str, int],
    limits: IncidentLimits = IncidentLimits(),
) -> pl.DataFrame:
    """Incidents with Int64 µs phase columns (converted to datetimes by analysis)."""
    pre_s, post_s = limits.pre_s, limits.post_s
    hang_stall_factor, hang_min_stall_s = limits.hang_stall_factor, limits.hang_min_stall_s
    stall_lim = {j: int(max(hang_stall_factor * (v or US), hang_min_stall_s * US)) for j, v in ideal_us.items()}
    ia = interrupted_attempts(att, ev, stall_lim)
    if ia.height == 0:
        return _empty(att.schema["job"])
    ia = _with_detection(ia, ev)
    ev = with_flags(ev)
    hits = _evidence(ia, ev, pre_s, post_s, dict(limits.file_offsets_us))
    ia = _with_stall(ia, ideal_us, job_end_us, hang_stall_factor, hang_min_stall_s)
    g = _onset_records(hits, ia, pre_s)
    inc = _root_causes(ia, g)
    inc = _selected_evidence(inc, g)
    inc = _lagging_ranks(inc, g)
    inc = _start_up_oom(inc)
    inc = _final_touches(inc, g)
    inc = _with_caught_up(_with_losses(inc), att, steps)
    inc = inc.sort("job", "attempt").with_columns(
        (pl.int_range(pl.len()).over("job")).cast(pl.Int32).alias("incident"),
        pl.lit(None, pl.Float64).alias("lost_time_s"),
    )
    return inc.drop("last_step", "next_resumed_from", "job_end_us")


def _with_detection(ia: pl.DataFrame, ev: pl.DataFrame) -> pl.DataFrame:
    """``t_last_progress`` and ``t_detected``: the first scheduler end / launcher restart after the
    last progress, else the attempt's last record."""
    ia = ia.with_columns(pl.coalesce("t_last_step_end", "t_first_step_start", "t_start").alias("t_last_progress"))
    det_ev = ev.filter(pl.col("kind").is_in(("job_end", "restart")) & pl.col("t").is_not_null()).select(
        "job", "attempt_idx", "t"
    )
    first_det = (
        ia.select("job", "attempt_idx", "t_last_progress")
        .join(det_ev, on=["job", "attempt_idx"])
        .filter(pl.col("t") >= pl.col("t_last_progress"))
        .group_by("job", "attempt_idx")
        .agg(pl.col("t").min().alias("_tdet"))
    )
    return ia.join(first_det, on=["job", "attempt_idx"], how="left").with_columns(
        pl.max_horizontal(pl.coalesce("_tdet", "t_end"), "t_last_progress").alias("t_detected")
    ).drop("_tdet")


def _end_state_class() -> pl.Expr:
    """The class a scheduler / pod end state is evidence of by itself (null: none)."""
    st = pl.col("state").fill_null("")
    return (
        pl.when(st.str.starts_with("CANCELLED by 0"))
        .then(pl.lit("maintenance"))
        .when(st.str.starts_with("CANCELLED by"))
        .then(pl.lit("user_cancel"))
        # A job step's CANCELLED only echoes its job's stop (see flag_exprs): no class.
        .when(st.str.starts_with("CANCELLED") & pl.col("sched_step_row"))
        .then(pl.lit(None, pl.String))
        .when(st.str.starts_with("CANCELLED"))
        .then(pl.lit("user_cancel"))
        # A container stopped by SIGTERM (exit 143) was stopped from outside: with no eviction,
        # preemption or drain (which outrank it) someone deleted or stopped the job.
        .when((pl.col("source") == "kubernetes") & (pl.col("code") == "143") & (st == "Error"))
        .then(pl.lit("user_cancel"))
        .otherwise(st.replace_strict(STATE_CLASS, default=None, return_dtype=pl.String))
    )


def _evidence_columns(offsets: dict[str, int]) -> list[str | pl.Expr]:
    """The columns of an evidence candidate: its class ``cls``, its ``file:line``, its time on
    the reference clock ``t_c`` (``offsets``: file -> clock offset, µs), and flags."""
    off = (pl.col("file").replace_strict(offsets, default=0, return_dtype=pl.Int64) if offsets
           else pl.lit(0, pl.Int64))
    return [
        "job",
        "attempt_idx",
        "t",
        (pl.col("t") - off).alias("t_c"),
        pl.col("ts_inferred").fill_null(False).alias("inferred"),
        pl.col("file").fill_null("?").alias("file"),
        "line",
        "kind",
        "node",
        "rank",
        "state",
        pl.coalesce("failure_class", pl.when(pl.col("kind") == "job_end").then(_end_state_class())).alias("cls"),
        (pl.col("file").fill_null("?") + pl.lit(":") + pl.col("line").cast(pl.String)).alias("ev"),
        pl.col("rule").fill_null("").is_in(WEAK_RULES).alias("weak_rule"),
        pl.col("peer_symptom"),
        pl.col("collective_seq"),
        pl.col("rule").fill_null(""),
        (
            (pl.col("kind") == "warning")
            | (
                ~pl.col("kind").is_in(("error", "job_end", "step"))
                & pl.col("severity").fill_null("info").is_in(("debug", "info", "warning"))
            )
        ).alias("soft"),
    ]


def _evidence(ia: pl.DataFrame, ev: pl.DataFrame, pre_s: float, post_s: float,
              offsets: dict[str, int]) -> pl.DataFrame:
    """Evidence candidates in each incident's window, plus its first NaN loss, by time."""
    cols = _evidence_columns(offsets)
    # Only classified records and scheduler ends can be evidence: filtered before the columns are built.
    maybe = pl.col("failure_class").is_not_null() | (pl.col("kind") == "job_end")
    lazy = ev.lazy().filter(pl.col("t").is_not_null() & maybe).select(cols)  # (only the columns read are filtered)
    cand = lazy.filter(pl.col("cls").is_not_null()).collect()
    win = ia.select(
        "job",
        "attempt_idx",
        pl.max_horizontal("t_start", pl.col("t_last_progress") - int(pre_s * US)).alias("_lo"),
        pl.min_horizontal(
            pl.col("t_restart").fill_null(2**62) - 1, pl.col("t_detected") + int(post_s * US)
        ).alias("_hi"),
    )
    hits = in_windows(win, cand.filter(~pl.col("cls").is_in(NOT_STOP))).drop("_lo", "_hi")
    # NaN losses logged by the interrupted attempt are numerics evidence wherever they fall.
    nan = (
        ev.filter((pl.col("kind") == "step") & pl.col("loss").is_nan().fill_null(False) & pl.col("t").is_not_null())
        .sort("t")
        .group_by("job", "attempt_idx")
        .agg(pl.all().first())
        .with_columns(pl.lit("error").cast(ev.schema["kind"]).alias("kind"), pl.lit("numerics").alias("failure_class"))
        .select(cols)
        .join(ia.select("job", "attempt_idx"), on=["job", "attempt_idx"], how="semi")
    )
    return pl.concat([hits.select(nan.columns), nan]).sort("job", "attempt_idx", "t")


def _with_stall(
    ia: pl.DataFrame, ideal_us: dict[str, int], job_end_us: dict[str, int], factor: float, min_s: float
) -> pl.DataFrame:
    """The stall before detection (``stall_us``), whether it is long enough to be a hang
    (``long_stall``: ``factor`` ideal steps and ``min_s``), the job's ideal step and end."""
    ideal = pl.col("job").replace_strict(ideal_us, default=None, return_dtype=pl.Int64)
    return ia.with_columns(
        pl.when(ideal > 0).then(ideal).otherwise(US).alias("ideal_step_us"),
        (pl.col("t_detected") - pl.col("t_last_progress")).alias("stall_us"),
        pl.col("job").replace_strict(job_end_us, default=None, return_dtype=pl.Int64).alias("job_end_us"),
    ).with_columns(
        (pl.col("stall_us") > pl.max_horizontal(factor * pl.col("ideal_step_us"), min_s * US)).alias("long_stall")
    )


def _with_losses(inc: pl.DataFrame) -> pl.DataFrame:
    """The table's columns (times in µs) with ``lost_steps`` and ``downtime_s``."""
    inc = inc.select(
        "job", pl.col("attempt_idx").alias("attempt"), "root_cause",
        pl.col("root_cause").replace_strict(_PLANNED_OF, return_dtype=pl.Boolean).alias("planned"),
        "symptoms", "nodes", "ranks", "t_last_progress", "t_first_error", "t_detected", "t_restart", "t_resumed",
        "confidence", "reason", "evidence", pl.col("last_step").alias("last_step"),
        pl.col("next_resumed_from").alias("next_resumed_from"), "job_end_us",
    ).cast({k: v for k, v in _ROWS_SCHEMA.items() if k != "job"})
    return inc.with_columns(
        pl.when(pl.col("last_step").is_null() | pl.col("next_resumed_from").is_null())
        .then(0)
        .otherwise((pl.col("last_step") - pl.col("next_resumed_from")).clip(0))
        .cast(pl.Int64)
        .alias("lost_steps"),
        divided(pl.coalesce("t_resumed", "job_end_us") - pl.col("t_last_progress"), US).alias("downtime_s"),
    )


def _with_caught_up(inc: pl.DataFrame, att: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Caught up: the end of the first later step row reaching the interrupted attempt's highest
    step (its resume point when it logged none); at once when that step was not lost."""
    high = att.select(
        "job",
        pl.col("attempt_idx").cast(pl.Int32).alias("attempt"),
        pl.coalesce("last_step", "resumed_from").alias("_hi_step"),
    )
    inc = inc.join(high, on=["job", "attempt"], how="left")
    cu = min_after(inc.select("job", "attempt", pl.col("_hi_step").alias("step")), steps, "t_end").rename(
        {"t_end": "t_caught_up"}
    )
    return inc.join(cu, on=["job", "attempt"], how="left").with_columns(
        pl.when(pl.col("t_resumed").is_null())
        .then(None)
        .when(pl.col("_hi_step") <= pl.col("next_resumed_from"))
        .then(pl.col("t_resumed"))
        .otherwise(pl.col("t_caught_up"))
        .alias("t_caught_up")
    ).drop("_hi_step")


@stage("OnsetRecords")
def _onset_records(hits: pl.DataFrame, ia: pl.DataFrame, pre_s: float) -> pl.DataFrame:
    """The records each interruption is judged on, in time order, with the ladder's row flags.

    Warnings (non-fatal Xids, link flaps) farther than ``pre_s`` from the last progress are
    background noise and dropped. ``is_planned`` planned stop, ``is_failure`` failure (not planned, not
    weak), ``is_strong`` a failure of a specific class, ``is_strong_error`` such an error, ``is_weak`` a weak
    (job-level termination) record, ``is_kill`` a weak record of a kill on a named node; for causal
    order, ``is_link`` first-hand network evidence (a port, link or adapter failing: rule role
    ``link``), ``is_net_echo`` other network errors (what ranks report when a peer or the fabric
    fails), ``is_cause`` errors of any other specific class (a process, GPU or node failing)."""
    pre = int(pre_s * US)
    g = hits.join(ia.select(*KEY, "t_last_progress"), on=KEY, how="left")
    lp, c = pl.col("t_last_progress"), pl.col("cls")
    near = (pl.col("t") >= lp - pre) & (pl.col("t") <= lp + pre)
    g = g.filter(~pl.col("soft") | near | c.is_in(PLANNED)).drop("t_last_progress")
    fail = ~c.is_in(PLANNED) & ~pl.col("weak_rule")
    strong = fail & ~c.is_in(("collective_timeout", "hang", "unknown"))
    weak = pl.col("weak_rule") & ~c.is_in(PLANNED)
    return g.with_columns(
        c.replace_strict(_PRIO, default=99, return_dtype=pl.Int64).alias("priority"),
        c.is_in(PLANNED).alias("is_planned"),
        fail.alias("is_failure"),
        strong.alias("is_strong"),
        (strong & ~pl.col("soft")).alias("is_strong_error"),
        weak.alias("is_weak"),
        (weak & pl.col("rule").is_in(KILL_RULES) & pl.col("node").is_not_null()).alias("is_kill"),
        (strong & pl.col("rule").is_in(LINK_RULES)).alias("is_link"),
        (strong & ~pl.col("soft") & (c == "network") & ~pl.col("rule").is_in(LINK_RULES)).alias("is_net_echo"),
        (strong & ~pl.col("soft") & (c != "network")).alias("is_cause"),
    )


def _root_causes(ia: pl.DataFrame, g: pl.DataFrame) -> pl.DataFrame:
    """Per interruption: the rung of the ladder (``rung``), root cause, confidence, reason and
    the class whose records decide it (``deciding_cls``); the module docstring gives the ladder."""
    d = _with_rung(_ladder_facts(ia, g))
    d = _with_root_cause(_with_gpu_specific(d, g))
    return d.with_columns(_reasons(d).alias("reason"))


@stage("InterruptionFacts")
def _ladder_facts(ia: pl.DataFrame, g: pl.DataFrame) -> pl.DataFrame:
    """The interruptions with what their onset records say, for each rung of the ladder: which
    kinds of record are present and the first class of each (``first_*_cls``), and all classes seen."""
    c, sym = pl.col("cls"), pl.col("peer_symptom")

    def first(mask: pl.Expr) -> pl.Expr:  # on rows in (priority, time) order
        return c.filter(mask).first()

    facts = g.sort(*KEY, "priority", "t", maintain_order=True).group_by(KEY).agg(
        pl.len().alias("n_onset_records"),
        pl.col("t").filter(pl.col("kind").is_in(("error", "warning"))).min().alias("t_first_error"),
        pl.col("is_strong_error").any().alias("any_error"),
        (pl.col("is_strong_error") & ~sym).any().alias("any_own_error"),
        (pl.col("is_strong_error") & ~sym & c.is_in(DEATH_CLASSES)).any().alias("any_own_death"),
        pl.col("is_kill").any().alias("any_kill"),
        first(pl.col("is_strong_error")).alias("first_error_cls"),
        first(pl.col("is_strong_error") & ~sym).alias("first_own_error_cls"),
        first(pl.col("is_strong")).alias("first_strong_cls"),
        first(pl.col("is_strong") & ~sym).alias("first_own_strong_cls"),
        (pl.col("is_strong_error") & (c == "node_failure")).any().alias("any_node_failure"),
        (pl.col("is_strong_error") & ~sym & (c == "node_failure")).any().alias("any_own_node_failure"),
        first(pl.col("is_planned") & c.is_in(("walltime", "preemption", "maintenance"))).alias("outside_stop_cls"),
        first(pl.col("is_planned")).alias("first_planned_cls"),
        (pl.col("is_failure") & (c == "hang")).any().alias("any_hang"),
        (pl.col("is_failure") & (c == "collective_timeout")).any().alias("any_collective_timeout"),
        pl.col("is_failure").any().alias("any_failure"),
        pl.col("is_weak").any().alias("any_weak"),
        (pl.col("is_weak") & ~pl.col("rule").is_in(SIGNAL_RULES)).any().alias("any_weak_nonsignal"),
    )
    classes = (
        g.sort(*KEY, "weak_rule", "priority", "t", maintain_order=True)
        .group_by(KEY, maintain_order=True)
        .agg(c.unique(maintain_order=True).alias("classes"))
    )
    d = ia.join(facts, on=KEY, how="left").join(classes, on=KEY, how="left").join(_causal_facts(g), on=KEY,
                                                                                 how="left")
    flags = ["any_error", "any_own_error", "any_own_death", "any_kill", "any_node_failure", "any_own_node_failure",
             "any_hang", "any_collective_timeout", "any_failure", "any_weak", "any_weak_nonsignal"]
    return d.with_columns(pl.col(flags).fill_null(False), pl.col("n_onset_records").fill_null(0),
                          pl.col("classes").fill_null(pl.lit([], pl.List(pl.String))))


def _causal_facts(g: pl.DataFrame) -> pl.DataFrame:
    """Per interruption, the causal order of its errors on the reference clock (``t_c``):

    - the first error of a specific non-network class (``t_cause``, its ``cause_file``/``cause_line``),
      and the class that explains it among those errors (``cause_cls``: the first on the priority
      ladder, as a GPU's fault explains the CUDA errors its processes then print; ``cause_where``:
      the rank and node of its first record);
    - the first network error that is not first-hand (``t_net_echo``, ``net_file``, ``net_line``,
      ``n_net_echo`` of them);
    - the first first-hand network record, a port or link failing (``t_link``)."""
    c = pl.col("cls")
    cause = g.filter(pl.col("is_cause")).sort(*KEY, "t_c", "line", maintain_order=True)
    where = pl.concat_str([pl.lit("rank ") + pl.col("rank").cast(pl.String), pl.col("node")], separator=" on ",
                          ignore_nulls=True)
    chosen = cause.sort(*KEY, "priority", "t_c", maintain_order=True).group_by(KEY).agg(
        c.first().alias("cause_cls"), where.first().alias("cause_where"))
    first = cause.group_by(KEY).agg(pl.col("t_c").first().alias("t_cause"), pl.col("file").first().alias("cause_file"),
                                     pl.col("line").first().alias("cause_line"))
    echo = g.filter(pl.col("is_net_echo")).sort(*KEY, "t_c", "line", maintain_order=True).group_by(KEY).agg(
        pl.col("t_c").first().alias("t_net_echo"), pl.col("file").first().alias("net_file"),
        pl.col("line").first().alias("net_line"), pl.col("inferred").first().alias("net_placed"),
        pl.len().alias("n_net_echo"))
    link = g.filter(pl.col("is_link")).group_by(KEY).agg(pl.col("t_c").min().alias("t_link"))
    keys = g.select(KEY).unique()
    return (keys.join(first, on=KEY, how="left").join(chosen, on=KEY, how="left")
            .join(echo, on=KEY, how="left").join(link, on=KEY, how="left"))


# The ladder's rungs (module docstring), each an expression over the interruption facts
# (``_ladder_facts``' columns, contract ``InterruptionFacts``) that can be evaluated alone.


def net_explained() -> pl.Expr:
    """Rung 1: the network errors are echoes of a process, GPU or node that failed: they do not
    provably come first (in one file, by line order; across files, stamped more than SAME_MOMENT_US
    before it on the corrected clocks: a time placed from a neighbouring line is only a lower
    bound) and no port or link failed before it."""
    c = pl.col
    same_file = c("cause_file") == c("net_file")
    net_first = (pl.when(same_file).then(c("net_line") < c("cause_line"))
                 .otherwise(~c("net_placed").fill_null(False) & (c("t_net_echo") < c("t_cause") - SAME_MOMENT_US)))
    link_first = (c("t_link") < c("t_cause") - SAME_MOMENT_US).fill_null(False)
    both = c("t_cause").is_not_null() & c("t_net_echo").is_not_null()
    return (both & ~net_first.fill_null(False) & ~link_first).fill_null(False)


def failure_explains_network() -> pl.Expr:
    """Rung 1: the network errors came after a failure that explains them: the cause is that
    failure (``cause_cls``), whatever the network's place on the priority ladder."""
    c = pl.col
    return c("cause_cls").is_not_null() & c("net_explained")


def peers_demoted() -> pl.Expr:
    """Peers' symptoms set aside: they never outrank a node-local death, nor a failure that came
    before them; and when they are the only errors and a kill is on record, the kill decides."""
    c = pl.col
    return c("any_error") & (c("any_own_death") | c("net_explained") | (~c("any_own_error") & c("any_kill")))


def killed_by_signal() -> pl.Expr:
    """The only errors are peers' symptoms and a process was killed by a signal (before rung 1)."""
    c = pl.col
    return c("any_error") & ~c("any_own_death") & ~c("any_own_error") & c("any_kill")


def rung1_error_class() -> pl.Expr:
    """Rung 1: the failure that explains the network errors (``cause_cls``) when there is one, else
    the first error class of specific records on the priority ladder (peers' symptoms left out when
    demoted); null when there is none. Reads ``failure_explains_network``, ``cause_cls``,
    ``peers_demoted``."""
    return (pl.when(pl.col("failure_explains_network")).then(pl.col("cause_cls"))
            .when(pl.col("peers_demoted")).then(pl.col("first_own_error_cls")).otherwise(pl.col("first_error_cls")))


def rung1_node_failure_seen() -> pl.Expr:
    """Rung 1: a node failure among the error records that count. Reads ``peers_demoted``."""
    return pl.when(pl.col("peers_demoted")).then(pl.col("any_own_node_failure")).otherwise(pl.col("any_node_failure"))


def rung1_gpu_swap() -> pl.Expr:
    """Rung 1: a GPU class whose deciding records are all generic CUDA failures, next to a node
    failure, is that node failure. Reads ``rung``, ``error_cls``, ``error_cls_specific``."""
    return ((pl.col("rung") == "error") & pl.col("error_cls").is_in(GPU_HW) & ~pl.col("error_cls_specific")
            & pl.col("node_failure_seen"))


def rung1_nan_stop() -> pl.Expr:
    """Rung 1: NaN losses stopped by a time limit, preemption or maintenance are that planned
    stop. Reads ``rung``, ``error_cause``, ``outside_stop_cls``."""
    return ((pl.col("rung") == "error") & (pl.col("error_cause") == "numerics")
            & pl.col("outside_stop_cls").is_not_null())


def rung2_warning_class() -> pl.Expr:
    """Rung 2: the first class of specific warnings near the last progress (null: none). Reads
    ``peers_demoted``."""
    return pl.when(pl.col("peers_demoted")).then(pl.col("first_own_strong_cls")).otherwise(pl.col("first_strong_cls"))


def rung3_detector() -> pl.Expr:
    """Rung 3: ``hang`` when a hang detector fired, else ``collective_timeout`` (null: neither)."""
    return (pl.when(pl.col("any_hang")).then(pl.lit("hang"))
            .when(pl.col("any_collective_timeout")).then(pl.lit("collective_timeout")))


def rung4_planned_class() -> pl.Expr:
    """Rung 4: the first planned stop's class (null: none)."""
    return pl.col("first_planned_cls")


def rung4_kill_hang() -> pl.Expr:
    """Rung 4: a walltime or user cancel after a long silent stall is a hang detected by the kill.
    Reads ``rung``."""
    return ((pl.col("rung") == "planned") & pl.col("first_planned_cls").is_in(("walltime", "user_cancel"))
            & pl.col("long_stall"))


def rung5_clean_exit() -> pl.Expr:
    """Rung 5: the attempt exited cleanly (and another followed: a time-budget interruption)."""
    return (pl.col("state").is_in(CLEAN) | pl.col("state").str.ends_with("Succeeded")).fill_null(False)


def rung6_weak() -> pl.Expr:
    """Rung 6: ``fail`` (records of unknown cause), ``stall`` (a long stall with no job-level
    record but kill signals), ``weak`` (job-level termination records only) or ``none``."""
    return (pl.when(pl.col("any_failure")).then(pl.lit("fail"))
            .when(pl.col("long_stall") & ~pl.col("any_weak_nonsignal")).then(pl.lit("stall"))
            .when(pl.col("any_weak")).then(pl.lit("weak"))
            .otherwise(pl.lit("none")))


def _with_rung(d: pl.DataFrame) -> pl.DataFrame:
    """The rung (``rung``), whether peers' symptoms are set aside (``peers_demoted``), and the
    first error / strong class and node failure within the records that count."""
    d = d.with_columns(net_explained().alias("net_explained"))
    d = d.with_columns(peers_demoted().alias("peers_demoted"), killed_by_signal().alias("killed"),
                       failure_explains_network().alias("failure_explains_network"))
    r_se, r_st, detector = rung1_error_class(), rung2_warning_class(), rung3_detector()
    rung = (
        pl.when(pl.col("killed")).then(pl.lit("killed"))
        .when(r_se.is_not_null()).then(pl.lit("error"))
        .when(r_st.is_not_null()).then(pl.lit("warning"))
        .when(detector.is_not_null()).then(detector)
        .when(rung4_planned_class().is_not_null()).then(pl.lit("planned"))
        .when(rung5_clean_exit()).then(pl.lit("clean"))
        .otherwise(rung6_weak())
    )
    return d.with_columns(rung.alias("rung"), r_se.alias("error_cls"), r_st.alias("strong_cls"),
                          rung1_node_failure_seen().alias("node_failure_seen"))


def _with_gpu_specific(d: pl.DataFrame, g: pl.DataFrame) -> pl.DataFrame:
    """``error_cls_specific``: some deciding error record of the first error class is not a
    generic CUDA failure text."""
    c = pl.col("cls")
    in_scope = ~pl.col("peer_symptom") | ~pl.col("peers_demoted")
    specific = (
        g.join(d.select(*KEY, "error_cls", "peers_demoted"), on=KEY, how="inner")
        .filter(pl.col("is_strong_error") & in_scope & (c == pl.col("error_cls"))
                & ~pl.col("rule").is_in(GENERIC_GPU_RULES))
        .select(KEY).unique().with_columns(pl.lit(True).alias("error_cls_specific"))
    )
    return d.join(specific, on=KEY, how="left").with_columns(pl.col("error_cls_specific").fill_null(False))


def _with_root_cause(d: pl.DataFrame) -> pl.DataFrame:
    """The rung's exceptions (``gpu_swap``, ``nan_stop``, ``kill_hang``), the deciding class
    ``deciding_cls``, ``root_cause`` and ``confidence``."""
    rung = pl.col("rung")
    d = d.with_columns(rung1_gpu_swap().alias("gpu_swap"))
    d = d.with_columns(
        pl.when(pl.col("gpu_swap")).then(pl.lit("node_failure")).otherwise(pl.col("error_cls")).alias("error_cause"))
    d = d.with_columns(rung1_nan_stop().alias("nan_stop"), rung4_kill_hang().alias("kill_hang"))
    nan_stop, kill_hang = pl.col("nan_stop"), pl.col("kill_hang")
    sel_cls = (
        pl.when(rung == "error")
        .then(pl.when(nan_stop).then(pl.col("outside_stop_cls")).otherwise(pl.col("error_cause")))
        .when(rung == "warning").then(pl.col("strong_cls"))
        .when(rung.is_in(("hang", "collective_timeout"))).then(rung)
        .when(rung == "planned").then(pl.col("first_planned_cls"))
    )
    root = (
        pl.when(rung.is_in(("error", "warning", "hang", "collective_timeout"))).then(pl.col("deciding_cls"))
        .when(rung == "planned").then(pl.when(kill_hang).then(pl.lit("hang")).otherwise(pl.col("first_planned_cls")))
        .when(rung == "clean").then(pl.lit("walltime"))
        .when(rung == "stall").then(pl.lit("hang"))
        .otherwise(pl.lit("unknown"))
    )
    conf = (
        pl.when(rung.is_in(("killed", "fail", "weak", "none"))).then(pl.lit("low"))
        .when((rung == "error") | ((rung == "planned") & ~kill_hang)).then(pl.lit("high"))
        .otherwise(pl.lit("medium"))
    )
    d = d.with_columns(sel_cls.alias("deciding_cls"))
    return d.with_columns(root.alias("root_cause"), conf.alias("confidence"))


def _reasons(d: pl.DataFrame) -> pl.Series:
    rung, spaced = pl.col("rung"), pl.col("root_cause").str.replace_all("_", " ")
    among = pl.when(pl.col("classes").list.len() > 1).then(pl.lit(" among ") + pl.col("classes").list.join(", "))
    # Stall lengths are worded by Python's number formatting, for the few interruptions that need it.
    stalls = d.select("stall_us", "ideal_step_us", "first_planned_cls", "rung", "kill_hang")
    worded = [
        None if not (k or r == "stall") else (
            f"progress stalled {_fmt(s / US)} (~{s / i:.0f} steps) with no error before the "
            f"{p.replace('_', ' ')} ended it: a hang detected by the kill" if k
            else f"progress stopped {_fmt(s / US)} before the attempt ended, with no error record"
        )
        for s, i, p, r, k in stalls.iter_rows()
    ]
    return d.select(
        pl.when(rung == "killed")
        .then(pl.lit("a process was killed by a signal with no recorded cause; the peers' network errors are symptoms"))
        .when(pl.col("nan_stop")).then(spaced + pl.lit(" stopped the attempt while it was logging NaN losses"))
        .when(pl.col("gpu_swap"))
        .then(pl.lit("node failure; the CUDA 'unknown error' records are what its processes saw"))
        .when((rung == "error") & pl.col("net_explained"))
        .then(pl.format("{} on {} came first; the {} network errors after it are its peers' symptoms ({})",
                        "error_cls", pl.col("cause_where").fill_null("a node the logs do not name"),
                        "n_net_echo", pl.col("classes").list.join(", ")))
        .when(rung == "error")
        .then(pl.col("error_cls") + pl.lit(" evidence has the highest causal priority") + among.fill_null(""))
        .when(rung == "warning").then(pl.col("root_cause") + pl.lit(" warnings at the onset, no error record"))
        .when(rung == "hang").then(pl.lit("a hang detector fired"))
        .when(rung == "collective_timeout").then(pl.lit("collective timeout with no other evidence"))
        .when((rung == "planned") & ~pl.col("kill_hang")).then(spaced + pl.lit(": planned stop"))
        .when(rung == "clean").then(pl.lit("attempt exited cleanly and the run was resubmitted"))
        .when(rung == "fail").then(pl.lit("only records of unknown cause"))
        .when(rung == "weak")
        .then(pl.lit("only job-level termination records (exit codes, failed states) and no cause"))
        .when(rung == "none").then(pl.lit("interruption with no usable evidence"))
        .otherwise(pl.Series(worded, dtype=pl.String))
    ).to_series()


def _selected_evidence(d: pl.DataFrame, g: pl.DataFrame) -> pl.DataFrame:
    """Nodes, ranks and evidence from the deciding records (those of ``deciding_cls`` in the rung's
    scope); the scheduler's end record is evidence too."""
    rung, c = pl.col("rung"), pl.col("cls")
    in_scope = pl.when(pl.col("peers_demoted")).then(~pl.col("peer_symptom")).otherwise(True)
    sel = (
        pl.when(rung == "killed").then(pl.col("is_kill"))
        .when(pl.col("nan_stop") | rung.is_in(("planned",))).then(c == pl.col("deciding_cls"))
        .when(rung == "error").then(pl.col("is_strong_error") & in_scope & (c == pl.col("deciding_cls")))
        .when(rung == "warning").then(pl.col("is_strong") & in_scope & (c == pl.col("deciding_cls")))
        .when(rung.is_in(("hang", "collective_timeout"))).then(pl.col("is_failure") & (c == pl.col("deciding_cls")))
        .when(rung == "fail").then(pl.col("is_failure"))
        .when(rung.is_in(("stall", "weak"))).then(pl.col("is_weak"))
        .otherwise(False)
    )
    s = g.join(d.select(*KEY, "rung", "deciding_cls", "peers_demoted", "nan_stop"), on=KEY, how="left").with_columns(
        sel.fill_null(False).alias("_sel"))
    node, named = pl.col("node"), pl.col("_sel") & (pl.col("kind") != "job_end") & pl.col("node").is_not_null()
    picked = s.group_by(KEY, maintain_order=True).agg(
        pl.col("_sel").any().alias("any_deciding"),
        node.filter(named).unique().sort().alias("_named"),
        node.filter(pl.col("_sel")).drop_nulls().unique().sort().alias("_all_nodes"),
        pl.col("rank").filter(pl.col("_sel")).drop_nulls().unique().sort().alias("_sel_ranks"),
        pl.col("ev").filter(pl.col("_sel")).head(10).alias("_ev"),
        (pl.col("_sel") & ~c.is_in(JOB_WIDE)).any().alias("deciding_not_job_wide"),
        pl.col("ev").filter(pl.col("kind") == "job_end").first().alias("_det"),
    )
    empty = pl.lit([], pl.List(pl.String))
    d = d.join(picked, on=KEY, how="left")
    d = d.with_columns(pl.col("any_deciding", "deciding_not_job_wide").fill_null(False))
    d = d.with_columns(
        pl.when(pl.col("_named").list.len() > 0).then(pl.col("_named")).otherwise(pl.col("_all_nodes"))
        .fill_null(empty).alias("nodes"),
    )
    # Ranks: those of the deciding records, else those seen on the deciding nodes.
    on_nodes = (
        g.join(d.filter(pl.col("nodes").list.len() > 0).select(*KEY, "nodes"), on=KEY, how="inner")
        .filter(pl.col("nodes").list.contains(pl.col("node")))
        .group_by(KEY).agg(pl.col("rank").drop_nulls().unique().sort().alias("_node_ranks"))
    )
    d = d.join(on_nodes, on=KEY, how="left")
    ranks = pl.when(pl.col("_sel_ranks").list.len() > 0).then(pl.col("_sel_ranks")).otherwise(pl.col("_node_ranks"))
    ev = pl.col("_ev").fill_null(empty)
    det_new = pl.col("_det").is_not_null() & ~ev.list.contains(pl.col("_det")).fill_null(False)
    return d.with_columns(
        ranks.fill_null(pl.lit([], pl.List(pl.Int32))).cast(pl.List(pl.Int32)).alias("ranks"),
        pl.when(det_new).then(ev.list.concat(pl.concat_list(pl.col("_det")))).otherwise(ev).alias("evidence"),
        pl.when(pl.col("root_cause").is_in(GPU_HW) & (pl.col("nodes").list.len() == 0)
                & (pl.col("n_onset_records") > 0))
        .then(pl.lit("medium")).otherwise(pl.col("confidence")).alias("confidence"),
    ).drop("_named", "_all_nodes", "_sel_ranks", "_ev", "_det", "_node_ranks")


def _lagging_ranks(d: pl.DataFrame, g: pl.DataFrame) -> pl.DataFrame:
    """A hang or collective timeout names the ranks that stalled: those whose watchdog reports an
    earlier collective (a lower sequence number) than the others waited in; their nodes too."""
    seqs = g.filter(pl.col("collective_seq").is_not_null() & pl.col("rank").is_not_null())
    if seqs.height == 0:
        return d
    per_rank = seqs.group_by(*KEY, "rank").agg(pl.col("collective_seq").max().alias("_seq"),
                                               pl.col("node").drop_nulls().first().alias("_node"))
    low, high = pl.col("_seq").min().over(KEY), pl.col("_seq").max().over(KEY)
    lag = (per_rank.with_columns(low.alias("_low"), high.alias("_high"))
           .filter((pl.col("_seq") == pl.col("_low")) & (pl.col("_low") < pl.col("_high"))))
    found = lag.sort("rank").group_by(KEY).agg(
        pl.col("rank").cast(pl.Int32).alias("_lag_ranks"),
        pl.col("_node").drop_nulls().unique().sort().alias("_lag_nodes"), pl.col("_low").first(),
        pl.col("_high").first())
    if found.height == 0:
        return d
    d = d.join(found, on=KEY, how="left")
    hit = pl.col("root_cause").is_in(("hang", "collective_timeout")) & pl.col("_lag_ranks").is_not_null()
    where = pl.format("rank {}{}", pl.col("_lag_ranks").cast(pl.List(pl.String)).list.join(", "),
                      pl.when(pl.col("_lag_nodes").list.len() > 0)
                      .then(pl.lit(" on ") + pl.col("_lag_nodes").list.join(", ")).otherwise(pl.lit("")))
    said = pl.format("{}; {} stalled: its watchdog's last collective was #{}, the others waited in #{}",
                     "reason", where, "_low", "_high")
    return d.with_columns(
        pl.when(hit).then(pl.col("_lag_ranks")).otherwise(pl.col("ranks")).alias("ranks"),
        pl.when(hit & (pl.col("_lag_nodes").list.len() > 0)).then(pl.col("_lag_nodes")).otherwise(pl.col("nodes"))
        .alias("nodes"),
        pl.when(hit).then(said).otherwise(pl.col("reason")).alias("reason"),
    ).drop("_lag_ranks", "_lag_nodes", "_low", "_high")


def _start_up_oom(d: pl.DataFrame) -> pl.DataFrame:
    """An OOM at start-up (no step) right after a GPU-hardware-class incident of the previous
    attempt on the same node is that hardware class; such OOMs in a row all take it."""
    d = d.sort(*KEY)
    prev_nodes = pl.col("nodes").shift(1).over("job")
    prev_att = pl.col("attempt_idx").shift(1).over("job")
    follows = (
        pl.col("root_cause").is_in(OOM) & (prev_att == pl.col("attempt_idx") - 1) & pl.col("first_step").is_null()
        & ((pl.col("nodes").list.len() == 0) | (pl.col("nodes").list.set_intersection(prev_nodes).list.len() > 0))
    ).fill_null(False)
    d = d.with_columns(follows.alias("_follows"), prev_nodes.alias("_prev_nodes")).with_columns(
        pl.when(~pl.col("_follows")).then(pl.col("root_cause")).forward_fill().over("job").alias("_chain_root")
    )
    up = pl.col("_follows") & pl.col("_chain_root").is_in(GPU_HW)
    where = pl.when(pl.col("nodes").list.len() > 0).then(pl.col("nodes")).otherwise(pl.col("_prev_nodes"))
    d = d.with_columns(
        pl.when(up).then(pl.format("{} at start-up on {} right after a {} incident on the same node: the faulty GPU "
                                   "surfaced as an OOM", "root_cause", where.list.join(", "), "_chain_root"))
        .otherwise(pl.col("reason")).alias("reason"),
        pl.when(up).then(pl.col("_chain_root")).otherwise(pl.col("root_cause")).alias("root_cause"),
        pl.when(up).then(pl.lit("medium")).otherwise(pl.col("confidence")).alias("confidence"),
    )
    at_start = pl.col("reason").str.starts_with(pl.col("root_cause") + pl.lit(" at start"))
    alone = (pl.col("root_cause").is_in(OOM) & pl.col("first_step").is_null() & (pl.col("confidence") == "high")
             & ~at_start)
    return d.with_columns(
        pl.when(alone).then(pl.lit("medium")).otherwise(pl.col("confidence")).alias("confidence"),
        pl.when(alone)
        .then(pl.col("reason") + pl.lit("; at start-up, before any step: a faulty GPU can also surface as an "
                                        "out-of-memory error"))
        .otherwise(pl.col("reason")).alias("reason"),
    ).drop("_follows", "_prev_nodes", "_chain_root")


def _final_touches(d: pl.DataFrame, g: pl.DataFrame) -> pl.DataFrame:
    """A planned stop's first record when no error came first; no culprit for a stop of the
    whole job; the other classes seen are symptoms."""
    root_t = (
        g.join(d.select(*KEY, "root_cause"), on=KEY, how="inner").filter(pl.col("cls") == pl.col("root_cause"))
        .group_by(KEY).agg(pl.col("t").min().alias("_t_root"))
    )
    d = d.join(root_t, on=KEY, how="left")
    planned = pl.col("root_cause").replace_strict(_PLANNED_OF, return_dtype=pl.Boolean)
    job_wide = pl.col("root_cause").is_in(JOB_WIDE) | (pl.col("any_deciding") & ~pl.col("deciding_not_job_wide"))
    symptoms = (
        d.select(*KEY, "root_cause", "classes").explode("classes")
        .group_by(KEY, maintain_order=True)
        .agg(pl.col("classes").filter(pl.col("classes") != pl.col("root_cause")).alias("symptoms"))
    )
    return d.join(symptoms, on=KEY, how="left").with_columns(
        pl.when(pl.col("t_first_error").is_null() & planned & (pl.col("n_onset_records") > 0)).then(pl.col("_t_root"))
        .otherwise(pl.col("t_first_error")).alias("t_first_error"),
        pl.when(job_wide).then(pl.lit([], pl.List(pl.String))).otherwise(pl.col("nodes")).alias("nodes"),
        pl.when(job_wide).then(pl.lit([], pl.List(pl.Int32))).otherwise(pl.col("ranks")).alias("ranks"),
    ).drop("_t_root")

def _empty(job: pl.DataType) -> pl.DataFrame:
    sch: dict[str, pl.DataType] = dict(INCIDENTS_SCHEMA)
    for k, v in list(sch.items()):
        if isinstance(v, pl.Datetime):
            sch[k] = pl.Int64()
    sch["job"] = job
    return pl.DataFrame(schema=sch)
