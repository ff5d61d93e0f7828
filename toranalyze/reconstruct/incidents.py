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

import polars as pl

from toranalyze.reconstruct.attribution import demote_peer_symptoms, is_peer_symptom
from toranalyze.reconstruct.intervals import in_windows, min_after
from toranalyze.reconstruct.progress import CLEAN_STATES, is_clean
from toranalyze.schema import frame_schema
from toranalyze.taxonomy import PLANNED, TAXONOMY, priority

US = 1_000_000
# Planned stops of the whole job: no node is to blame.
JOB_WIDE = frozenset({"preemption", "walltime", "user_cancel", "scheduling"})

INCIDENTS_SCHEMA = frame_schema(
    {
        "job": pl.String,
        "incident": pl.Int32,
        "attempt": pl.Int32,
        "root_cause": pl.String,
        "planned": pl.Boolean,
        "symptoms": pl.List(pl.String),
        "nodes": pl.List(pl.String),
        "ranks": pl.List(pl.Int32),
        "t_last_progress": pl.Datetime("us", "UTC"),
        "t_first_error": pl.Datetime("us", "UTC"),
        "t_detected": pl.Datetime("us", "UTC"),
        "t_restart": pl.Datetime("us", "UTC"),
        "t_resumed": pl.Datetime("us", "UTC"),
        "t_caught_up": pl.Datetime("us", "UTC"),
        "lost_steps": pl.Int64,
        "lost_time_s": pl.Float64,
        "downtime_s": pl.Float64,
        "confidence": pl.String,
        "reason": pl.String,
        "evidence": pl.List(pl.String),
    }
)

# The rows assembled per interruption before the derived columns: the table's own columns with
# times still as integer microseconds, plus the helpers the derived columns are computed from.
_ROWS_SCHEMA = pl.Schema(
    {
        **{
            name: (pl.Int64 if isinstance(dtype, pl.Datetime) else dtype)
            for name, dtype in INCIDENTS_SCHEMA.items()
            if name not in ("incident", "t_caught_up", "lost_steps", "lost_time_s", "downtime_s")
        },
        "_last_step": pl.Int64,
        "_next_rf": pl.Int64,
        "_job_end": pl.Int64,
    }
)

# Scheduler / pod end states that are evidence by themselves when no rule classified them.
STATE_CLASS = {
    "NODE_FAIL": "node_failure",
    "OUT_OF_MEMORY": "oom_host",
    "OOMKilled": "oom_host",
    "TIMEOUT": "walltime",
    "DEADLINE": "walltime",
    "DeadlineExceeded": "walltime",
    "CANCELLED": "user_cancel",
    "PREEMPTED": "preemption",
    "Preempted": "preemption",
    "Evicted": "preemption",
    "NodeNotReady": "node_failure",
}
CLEAN = CLEAN_STATES
NOT_STOP = ("fail_slow", "scheduling")
GPU_HW = ("gpu_hardware", "gpu_memory", "gpu_interconnect")
# Rules that only say the job (or a worker, a pod) ended badly: exit codes, FAILED states.
# They are the lowest rung of the causal ladder: a cause found anywhere else wins, and alone
# they give ``unknown``.
WEAK_RULES = (
    "slurm-failed-weak",
    "torch-child-failed",
    "torch-exit-sigkill",
    "torch-signal-exception",
    "kubernetes-exit-nonzero",
    "kubernetes-job-failed",
    "kubernetes-crashloop",
)
# GPU-class rules that only repeat a generic CUDA failure text (no Xid, no ECC counter).
GENERIC_GPU_RULES = ("torch-cuda-gpu-lost", "nccl-cuda-unknown")
# Weak records that say the processes were killed from outside (SIGKILL/SIGTERM, a signal
# exception): after a silent stall that is how a hang ends.
SIGNAL_RULES = ("torch-exit-sigkill", "torch-signal-exception")
OOM = ("oom_gpu", "oom_host")
_PRIO = {name: priority(name) for name in TAXONOMY}


# Flags of an event computed from its message text (with_flags), so that the text itself need
# not travel through the stages: a peer's symptom, and a scheduler job step's row.
FLAG_COLUMNS = ("_sym", "_step_row")


def with_flags(ev: pl.DataFrame) -> pl.DataFrame:
    """Add FLAG_COLUMNS (kept when present)."""
    if all(c in ev.columns for c in FLAG_COLUMNS):
        return ev
    # A job step (``.batch``, ``.0``) ends CANCELLED whenever its job is stopped (time limit,
    # preemption, node failure): only the job's own row says who cancelled.
    step_row = pl.col("job_id").fill_null("").str.contains(r"\.") | pl.col("message").fill_null("").str.contains(
        r"\bJobID=\S+\.(?:batch|extern|\d+)\b|\bStepName="
    )
    return ev.with_columns(is_peer_symptom().fill_null(False).alias("_sym"), step_row.alias("_step_row"))


def interrupted_attempts(att: pl.DataFrame, ev: pl.DataFrame, stall_us: dict[str, int] | None = None) -> pl.DataFrame:
    """Attempts that end by an interruption, with their next attempt's facts joined.

    The last attempt of a job counts when it ended badly (a scheduler end that is not clean),
    or, with no scheduler end, when error records follow its last progress or its records go on
    for longer than ``stall_us[job]`` without progress (a hang the logs end in)."""
    a = att.sort("job", "attempt_idx").with_columns(
        (pl.col("attempt_idx") == pl.col("attempt_idx").max().over("job")).alias("_last"),
        pl.col("t_start").shift(-1).over("job").alias("t_restart"),
        pl.col("attempt_idx").shift(-1).over("job").alias("_next"),
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
    a = a.join_asof(
        later.sort("_la").select("job", "_la", pl.col("_tr").alias("_tr2"), pl.col("_rf").alias("_rf2")),
        left_on="_key",
        right_on="_la",
        by="job",
        strategy="forward", check_sortedness=False).with_columns(
        pl.when(pl.col("_last")).then(None).otherwise(pl.coalesce("t_resumed", "_tr2")).alias("t_resumed"),
        pl.when(pl.col("_last"))
        .then(None)
        .otherwise(pl.coalesce("next_resumed_from", "_rf2"))
        .alias("next_resumed_from"),
    )
    errs_after = (
        ev.filter(pl.col("failure_class").is_not_null() & pl.col("t").is_not_null())
        .group_by("job", "attempt_idx")
        .agg(pl.col("t").max().alias("_t_last_err"))
    )
    a = a.join(errs_after, on=["job", "attempt_idx"], how="left")
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
    a = a.filter(~pl.col("_last") | bad_end | silent_end_with_errors | stalled)
    return a.drop("_key", "_la", "_tr2", "_rf2", "_t_last_err").sort("job", "attempt_idx")


def _fmt(v: float) -> str:
    return f"{v:.0f} s" if v >= 10 else f"{v:.1f} s"


def build_incidents(
    att: pl.DataFrame,
    ev: pl.DataFrame,
    steps: pl.DataFrame,
    ideal_us: dict[str, int],
    job_end_us: dict[str, int],
    *,
    pre_s: float = 60.0,
    post_s: float = 120.0,
    hang_stall_factor: float = 10.0,
    hang_min_stall_s: float = 120.0,
) -> pl.DataFrame:
    """Incidents with Int64 µs phase columns (converted to datetimes by analysis)."""
    stall_lim = {j: int(max(hang_stall_factor * (v or US), hang_min_stall_s * US)) for j, v in ideal_us.items()}
    ia = interrupted_attempts(att, ev, stall_lim)
    if ia.height == 0:
        return _empty(att.schema["job"])
    # Detection: the first scheduler end / launcher restart after the last progress, else the
    # attempt's last record.
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
    ia = ia.join(first_det, on=["job", "attempt_idx"], how="left").with_columns(
        pl.max_horizontal(pl.coalesce("_tdet", "t_end"), "t_last_progress").alias("t_detected")
    )
    # Evidence candidates in each incident's window.
    ev = with_flags(ev)
    st = pl.col("state").fill_null("")
    step_row = pl.col("_step_row")
    state_cls = (
        pl.when(st.str.starts_with("CANCELLED by 0"))
        .then(pl.lit("maintenance"))
        .when(st.str.starts_with("CANCELLED by"))
        .then(pl.lit("user_cancel"))
        .when(st.str.starts_with("CANCELLED") & step_row)
        .then(pl.lit(None, pl.String))
        .when(st.str.starts_with("CANCELLED"))
        .then(pl.lit("user_cancel"))
        # A container stopped by SIGTERM (exit 143) was stopped from outside: with no eviction,
        # preemption or drain (which outrank it) someone deleted or stopped the job.
        .when((pl.col("source") == "kubernetes") & (pl.col("code") == "143") & (st == "Error"))
        .then(pl.lit("user_cancel"))
        .otherwise(st.replace_strict(STATE_CLASS, default=None, return_dtype=pl.String))
    )
    cols = [
        "job",
        "attempt_idx",
        "t",
        "kind",
        "node",
        "rank",
        "state",
        pl.coalesce("failure_class", pl.when(pl.col("kind") == "job_end").then(state_cls)).alias("cls"),
        (pl.col("file").fill_null("?") + pl.lit(":") + pl.col("line").cast(pl.String)).alias("ev"),
        pl.col("rule").fill_null("").is_in(WEAK_RULES).alias("_weak"),
        pl.col("_sym"),
        pl.col("rule").fill_null(""),
        (
            (pl.col("kind") == "warning")
            | (
                ~pl.col("kind").is_in(("error", "job_end", "step"))
                & pl.col("severity").fill_null("info").is_in(("debug", "info", "warning"))
            )
        ).alias("_soft"),
    ]
    cand = ev.filter(pl.col("t").is_not_null()).select(cols).filter(pl.col("cls").is_not_null())
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
        .with_columns(pl.lit("error").alias("kind"), pl.lit("numerics").alias("failure_class"))
        .select(cols)
        .join(ia.select("job", "attempt_idx"), on=["job", "attempt_idx"], how="semi")
    )
    hits = pl.concat([hits.select(nan.columns), nan]).sort("job", "attempt_idx", "t")
    by_att = {k: g for k, g in hits.group_by("job", "attempt_idx")}
    rows = []
    prev_root: dict[str, tuple[str, set[str], int]] = {}
    for r in ia.iter_rows(named=True):
        job, a = r["job"], r["attempt_idx"]
        g = by_att.get((job, a))
        ideal = ideal_us.get(job) or US
        stall_us = r["t_detected"] - r["t_last_progress"]
        stall_s = stall_us / US
        long_stall = stall_us > max(hang_stall_factor * ideal, hang_min_stall_s * US)
        classes: list[str] = []
        t_first_error = None
        evidence: list[str] = []
        nodes: list[str] = []
        ranks: list[int] = []
        conf = "high"
        sel: pl.DataFrame | None = None
        fail: pl.DataFrame | None = None
        strong: pl.DataFrame | None = None
        strong_err: pl.DataFrame | None = None
        weak: pl.DataFrame | None = None
        planned_cls: list[str] = []
        if g is not None and g.height:
            lp = r["t_last_progress"]
            near = (pl.col("t") >= lp - int(pre_s * US)) & (pl.col("t") <= lp + int(pre_s * US))
            # Warnings (non-fatal Xids, link flaps) far from the onset are background noise.
            g = g.filter(~pl.col("_soft") | near | pl.col("cls").is_in(PLANNED))
            g = g.with_columns(pl.col("cls").replace_strict(_PRIO, default=99, return_dtype=pl.Int64).alias("_prio"))
        if g is not None and g.height:
            classes = g.sort("_weak", "_prio", "t")["cls"].unique(maintain_order=True).to_list()
            errs = g.filter(pl.col("kind").is_in(("error", "warning")))
            if errs.height:
                t_first_error = errs["t"].min()
            fail = g.filter(~pl.col("cls").is_in(PLANNED) & ~pl.col("_weak"))
            strong = fail.filter(~pl.col("cls").is_in(("collective_timeout", "hang", "unknown")))
            strong_err = strong.filter(~pl.col("_soft"))
            planned_cls = g.filter(pl.col("cls").is_in(PLANNED)).sort("_prio", "t")["cls"].unique(
                maintain_order=True).to_list()
            weak = g.filter(pl.col("_weak") & ~pl.col("cls").is_in(PLANNED))
        outside = [c for c in planned_cls if c in ("walltime", "preemption", "maintenance")]
        killed = None
        if strong_err is not None and strong is not None and strong_err.height:
            # Peers' "remote process exited" / "connection reset" never outrank a death.
            strong_err, strong, killed = demote_peer_symptoms(strong_err, strong, weak)
        if killed is not None:
            root, conf = "unknown", "low"
            reason = "a process was killed by a signal with no recorded cause; the peers' network errors are symptoms"
            sel = killed
        elif strong_err is not None and strong_err.height:
            root = strong_err.sort("_prio", "t")["cls"][0]
            reason = f"{root} evidence has the highest causal priority"
            if len(classes) > 1:
                reason += " among " + ", ".join(classes)
            sel = strong_err.filter(pl.col("cls") == root)
            generic = sel.filter(~pl.col("rule").is_in(GENERIC_GPU_RULES)).height == 0
            if root in GPU_HW and generic and strong_err.filter(pl.col("cls") == "node_failure").height:
                # "CUDA error: unknown error" is what every process sees when its node dies; with
                # the scheduler naming a failed node and no GPU record of its own, the node failed.
                root = "node_failure"
                reason = "node failure; the CUDA 'unknown error' records are what its processes saw"
                sel = strong_err.filter(pl.col("cls") == root)
            if root == "numerics" and outside:
                # NaN losses do not stop a job by themselves (a person does, after a while): a
                # time limit, preemption or maintenance that came first is the interruption.
                root = outside[0]
                reason = f"{root.replace('_', ' ')} stopped the attempt while it was logging NaN losses"
                assert g is not None  # planned classes come from g
                sel = g.filter(pl.col("cls") == root)
        elif strong is not None and strong.height:
            root = strong.sort("_prio", "t")["cls"][0]
            reason, conf = f"{root} warnings at the onset, no error record", "medium"
            sel = strong.filter(pl.col("cls") == root)
        elif fail is not None and fail.filter(pl.col("cls") == "hang").height:
            root, reason, conf = "hang", "a hang detector fired", "medium"
            sel = fail.filter(pl.col("cls") == "hang")
        elif fail is not None and fail.filter(pl.col("cls") == "collective_timeout").height:
            root = "collective_timeout"
            reason = "collective timeout with no other evidence"
            conf = "medium"
            sel = fail.filter(pl.col("cls") == root)
        elif planned_cls:
            assert g is not None  # planned classes come from g
            root = planned_cls[0]
            sel = g.filter(pl.col("cls") == root)
            if root in ("walltime", "user_cancel") and long_stall:
                reason = (
                    f"progress stalled {_fmt(stall_s)} (~{stall_us / ideal:.0f} steps) with no error before the "
                    f"{root.replace('_', ' ')} ended it: a hang detected by the kill"
                )
                root, conf = "hang", "medium"
            else:
                reason = f"{root.replace('_', ' ')}: planned stop"
        elif r["state"] in CLEAN or str(r["state"] or "").endswith("Succeeded"):
            root, reason, conf = "walltime", "attempt exited cleanly and the run was resubmitted", "medium"
        elif fail is not None and fail.height:
            root, reason, conf = "unknown", "only records of unknown cause", "low"
            sel = fail
        elif long_stall and (weak is None or weak.filter(~pl.col("rule").is_in(SIGNAL_RULES)).height == 0):
            # Silent stall ended from outside (a kill signal, or nothing at all): a hang.
            root, conf = "hang", "medium"
            reason = f"progress stopped {_fmt(stall_s)} before the attempt ended, with no error record"
            sel = weak
        elif weak is not None and weak.height:
            # The processes exited on their own with a failure code: a crash whose cause the logs
            # do not give.
            root, conf = "unknown", "low"
            reason = "only job-level termination records (exit codes, failed states) and no cause"
            sel = weak
        else:
            root, reason, conf = "unknown", "interruption with no usable evidence", "low"
        if sel is not None and sel.height:
            # A record that names the failing node beats the host a scheduler banner was printed
            # on (the batch host of "JOB ... CANCELLED ... DUE TO NODE FAILURE").
            named = sel.filter((pl.col("kind") != "job_end") & pl.col("node").is_not_null())
            nodes = sorted(set((named if named.height else sel)["node"].drop_nulls().to_list()))
            # Ranks: those of the deciding records, else those seen on the deciding nodes.
            rk = sel["rank"].drop_nulls().unique().to_list()
            if not rk and nodes and g is not None:
                rk = g.filter(pl.col("node").is_in(nodes))["rank"].drop_nulls().unique().to_list()
            ranks = sorted(int(x) for x in rk)
            evidence = sel.sort("t")["ev"].head(10).to_list()
        if g is not None and g.height:
            det = g.filter(pl.col("kind") == "job_end")["ev"].head(1).to_list()
            evidence += [e for e in det if e not in evidence]
            if root in GPU_HW and not nodes:
                conf = "medium"
        # OOM at start-up right after a GPU hardware incident on the same node.
        if root in OOM and job in prev_root:
            p_root, p_nodes, p_att = prev_root[job]
            no_steps = r["first_step"] is None
            if p_root in GPU_HW and p_att == a - 1 and no_steps and (not nodes or set(nodes) & p_nodes):
                reason = (
                    f"{root} at start-up on {', '.join(sorted(set(nodes) or p_nodes))} right after a {p_root} "
                    f"incident on the same node: the faulty GPU surfaced as an OOM"
                )
                root, conf = p_root, "medium"
        at_start = str(reason).startswith(root + " at start")
        if root in OOM and r["first_step"] is None and conf == "high" and not at_start:
            conf = "medium"
            reason += "; at start-up, before any step: a faulty GPU can also surface as an out-of-memory error"
        prev_root[job] = (root, set(nodes), a)
        if t_first_error is None and TAXONOMY[root].planned and g is not None and g.height:
            t_first_error = g.filter(pl.col("cls") == root)["t"].min()
        decided_by = set(sel["cls"].to_list()) if sel is not None and "cls" in sel.columns else set()
        if root in JOB_WIDE or (decided_by and decided_by <= JOB_WIDE):
            # A stop of the whole job (or a hang only a job-wide kill revealed) names no culprit:
            # Slurm prints it on the batch host, Kubernetes on every pod's node; either way the
            # nodes are where the job ran, not what failed.
            nodes, ranks = [], []
        symptoms = [c for c in classes if c != root]
        rows.append(
            {
                "job": job,
                "attempt": a,
                "root_cause": root,
                "planned": bool(TAXONOMY[root].planned),
                "symptoms": symptoms,
                "nodes": nodes,
                "ranks": ranks,
                "t_last_progress": r["t_last_progress"],
                "t_first_error": t_first_error,
                "t_detected": r["t_detected"],
                "t_restart": r["t_restart"],
                "t_resumed": r["t_resumed"],
                "confidence": conf,
                "reason": reason,
                "evidence": evidence,
                "_last_step": r["last_step"],
                "_next_rf": r["next_resumed_from"],
                "_job_end": job_end_us.get(job),
            }
        )
    inc = pl.DataFrame(rows, schema={**_ROWS_SCHEMA, "job": att.schema["job"]})
    inc = inc.with_columns(
        pl.when(pl.col("_last_step").is_null() | pl.col("_next_rf").is_null())
        .then(0)
        .otherwise((pl.col("_last_step") - pl.col("_next_rf")).clip(0))
        .cast(pl.Int64)
        .alias("lost_steps"),
        ((pl.coalesce("t_resumed", "_job_end") - pl.col("t_last_progress")) / US).alias("downtime_s"),
    )
    # Caught up: the end of the first later step row reaching the interrupted attempt's highest
    # step (its resume point when it logged none); at once when that step was not lost.
    high = att.select(
        "job",
        pl.col("attempt_idx").cast(pl.Int32).alias("attempt"),
        pl.coalesce("last_step", "resumed_from").alias("_hi_step"),
    )
    inc = inc.join(high, on=["job", "attempt"], how="left")
    cu = min_after(inc.select("job", "attempt", pl.col("_hi_step").alias("step")), steps, "t_end").rename(
        {"t_end": "t_caught_up"}
    )
    inc = inc.join(cu, on=["job", "attempt"], how="left").with_columns(
        pl.when(pl.col("t_resumed").is_null())
        .then(None)
        .when(pl.col("_hi_step") <= pl.col("_next_rf"))
        .then(pl.col("t_resumed"))
        .otherwise(pl.col("t_caught_up"))
        .alias("t_caught_up")
    )
    inc = inc.sort("job", "attempt").with_columns(
        (pl.int_range(pl.len()).over("job")).cast(pl.Int32).alias("incident"),
        pl.lit(None, pl.Float64).alias("lost_time_s"),
    )
    return inc.drop("_last_step", "_next_rf", "_job_end", "_hi_step")


def _empty(job: pl.DataType) -> pl.DataFrame:
    sch: dict[str, pl.DataType] = dict(INCIDENTS_SCHEMA)
    for k, v in list(sch.items()):
        if isinstance(v, pl.Datetime):
            sch[k] = pl.Int64()
    sch["job"] = job
    return pl.DataFrame(schema=sch)
