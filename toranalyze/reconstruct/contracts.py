"""The frames handed from one stage of the per-run analysis to the next, as checked schemas.

events (``EVENT_SCHEMA``) -> :class:`PreparedEventRows` and :class:`Jobs` (prepare.py)
-> :class:`StepRecords` and :class:`AttemptFacts` (progress.py) -> :class:`StepIntervals`,
:class:`HealthySteps`, :class:`Checkpoints`, :class:`Evaluations` -> :class:`SlowPeriodRows`,
:class:`IdealSteps` -> :class:`PlacedStepRows`, :class:`PlacedAttempts`, :class:`JobWindows`
-> :class:`OnsetRecords`, :class:`InterruptionFacts` -> :class:`IncidentRows` (incidents.py)
-> :class:`LedgerBuckets`, :class:`LedgerStepRows` (ledger.py) -> the run tables
(:class:`AttemptsTable`, :class:`IncidentsTable`, :class:`SlowPeriodsTable`, :class:`TorTable`,
:class:`ResourcesTable`; docs/tables.md).

Between prepare and the run tables jobs are codes (``job``, UInt32: the row of the jobs table) and
times integer µs since the epoch. A contract names the columns a stage reads or writes; a frame
may carry more (a plugin's columns), never a column whose name starts with ``_`` (a temporary
column lives and dies inside one function).

``check(frame, Contract)`` validates a frame. The stages call it through reconstruct/stages.py,
only when the environment variable ``TORANALYZE_CHECK_CONTRACTS`` is ``1`` (the test suite sets
it): a normal run does not even import this module, and pays one lookup a stage.
"""

from __future__ import annotations

import functools
from typing import Any

import dataframely as dy
import polars as pl

from toranalyze.reconstruct.tables import (
    ATTEMPTS_SCHEMA,
    INCIDENTS_SCHEMA,
    RESOURCES_SCHEMA,
    SLOW_PERIODS_SCHEMA,
    TOR_SCHEMA,
)


def _key(dtype: Any = dy.UInt32) -> dy.Column:
    return dtype(nullable=False)


def _opt(dtype: Any) -> dy.Column:
    if dtype is dy.Float64:  # a NaN (loss, a ratio) is a value the stages read, not a fault
        return dtype(nullable=True, allow_nan=True, allow_inf=True)
    return dtype(nullable=True)


class PreparedEventRows(dy.Schema):
    """The events after the global steps (``PreparedEvents.events``): the stages' columns only."""

    job = _key()
    attempt_idx = _key(dy.Int32)
    "Whose record: the job's code and the attempt (0, 1, ...) assign_attempts gave it."
    row = _key(dy.Int64)
    file = _opt(dy.String)
    line = _opt(dy.Int64)
    "Where it was read: its position in the input events, its file and line."
    t = _opt(dy.Int64)
    ts_inferred = _opt(dy.Bool)
    "When (µs since the epoch), and whether that time was placed rather than read."
    source = dy.Any()
    kind = dy.Any()
    severity = dy.Any()
    "What it is: enums of the event vocabulary (schema.py; a plugin may add words)."
    node = _opt(dy.String)
    rank = _opt(dy.Int32)
    n_nodes = _opt(dy.Int32)
    n_gpus = _opt(dy.Int32)
    "Where it ran, and the job's size when the record states it."
    step = _opt(dy.Int64)
    step_time_s = _opt(dy.Float64)
    loss = _opt(dy.Float64)
    duration_s = _opt(dy.Float64)
    "Progress: step records' step and timing, a checkpoint load's duration."
    code = _opt(dy.String)
    state = _opt(dy.String)
    failure_class = _opt(dy.String)
    rule = _opt(dy.String)
    "How it ended and how it was classified (exit code, scheduler state, class and rule id)."
    base_job_id = _opt(dy.String)
    "The scheduler id without its array or step suffix (the attempt's ``job_id``)."
    peer_symptom = _key(dy.Bool)
    sched_step_row = _key(dy.Bool)
    collective_seq = _opt(dy.Int64)
    """Flags read from the message: a peer's symptom of a network failure; a scheduler job step's row;
    the sequence number of the collective a watchdog timed out on."""


class Jobs(dy.Schema):
    """The analysed jobs (``PreparedEvents.jobs``), in code order."""

    job = _key()
    path = _opt(dy.String)
    job_ids = dy.List(dy.String(nullable=True), nullable=True)
    identity = _opt(dy.String)
    "The job's code, its directory, its scheduler ids and how it was identified."


class StepRecords(dy.Schema):
    """One row per logged step of an attempt, ranks merged (progress.step_rows)."""

    job = _key()
    attempt_idx = _key(dy.Int32)
    step = _key(dy.Int64)
    "Which step of which attempt."
    t_log = _opt(dy.Int64)
    rep_us = _opt(dy.Int64)
    n_ranks = _opt(dy.UInt32)
    t_end = _opt(dy.Int64)
    "When it was logged, its reported duration, how many ranks logged it, when it ended (µs)."


class AttemptFacts(dy.Schema):
    """One row per attempt: what its records say (progress.attempt_table)."""

    job = _key()
    attempt_idx = _key(dy.Int32)
    "Which attempt."
    t_start = _opt(dy.Int64)
    t_sched_start = _opt(dy.Int64)
    t_init = _opt(dy.Int64)
    t_init_done = _opt(dy.Int64)
    t_restart_evt = _opt(dy.Int64)
    "When it started: scheduler start, trainer start-up and its end, a launcher's restart."
    t_job_end = _opt(dy.Int64)
    t_last_record = _opt(dy.Int64)
    t_end = _opt(dy.Int64)
    state = _opt(dy.String)
    exit_code = _opt(dy.String)
    "How it ended: the scheduler end, its last live record, its end, end state and exit code."
    job_id = _opt(dy.String)
    ckpt_loaded = _opt(dy.Int64)
    t_ckpt_load = _opt(dy.Int64)
    ckpt_load_us = _opt(dy.Int64)
    resumed_from = _opt(dy.Int64)
    "Its scheduler id; the checkpoint it loaded (step, when, how long) and the step it resumed from."
    first_step = _opt(dy.Int64)
    last_step = _opt(dy.Int64)
    n_step_rows = _opt(dy.UInt32)
    t_first_step_end = _opt(dy.Int64)
    t_last_step_end = _opt(dy.Int64)
    log_interval = _opt(dy.Int64)
    "Its steps: range, number of step rows, first and last step ends, the job's logging interval."


class StepIntervals(StepRecords):
    """Step rows as intervals (progress.step_intervals): what each row's steps took."""

    prev_end = _opt(dy.Int64)
    prev_step = _opt(dy.Int64)
    n = _opt(dy.Int64)
    d_us = _opt(dy.Int64)
    "The previous row's end and step, the steps this row covers and their duration (µs)."


class HealthySteps(StepIntervals):
    """Step rows placed with the preliminary ideal, flagged when they measure a step."""

    start = _opt(dy.Int64)
    end = _opt(dy.Int64)
    healthy = _key(dy.Bool)
    "The row's placed interval; whether it measures a step (not blocked, past warm-up)."


class Checkpoints(dy.Schema):
    """Blocking checkpoint saves (progress.checkpoint_intervals)."""

    job = _key()
    start = _opt(dy.Int64)
    end = _opt(dy.Int64)
    step = _opt(dy.Int64)
    inferred = _opt(dy.Bool)
    evidence = _opt(dy.String)
    "The save's interval, its step, whether it was inferred from a gap, and what says so."


class Evaluations(dy.Schema):
    """Evaluation intervals (progress.eval_intervals)."""

    job = _key()
    start = _opt(dy.Int64)
    end = _opt(dy.Int64)
    "The evaluation's interval."


class SlowPeriodRows(dy.Schema):
    """Slow periods found in an attempt's healthy steps (slowness.detect_in)."""

    job = _key()
    attempt_idx = _key(dy.Int32)
    start = _opt(dy.Int64)
    end = _opt(dy.Int64)
    "The period's attempt and interval."
    first_step = _opt(dy.Int64)
    last_step = _opt(dy.Int64)
    first_prev_step = _opt(dy.Int64)
    steps = _opt(dy.Int64)
    med_us = _opt(dy.Float64)
    "Its steps and their median duration."


class HealthyStepTimes(dy.Schema):
    """The healthy steps outside slow periods: what the ideal step time and the jitter read."""

    job = _key()
    d_us = _opt(dy.Int64)
    n = _opt(dy.Int64)
    rep_us = _opt(dy.Int64)
    "A row's duration, the steps it covers and the duration it reported."


class StepJitter(dy.Schema):
    """Per job, the relative spread of one step's time (ledger.step_jitter)."""

    job = _key()
    sigma = _opt(dy.Float64)
    "The per-step jitter (relative standard deviation)."


class IdealSteps(dy.Schema):
    """Per analysed job, the ideal step time and where it comes from."""

    job = _key()
    ideal_us = _opt(dy.Int64)
    ideal_step_source = _opt(dy.String)
    "The ideal step time (µs) and a sentence saying how it was found."


class PlacedStepRows(StepIntervals):
    """Step rows placed with the ideal step time, with the steps a rollback discarded."""

    start = _opt(dy.Int64)
    end = _opt(dy.Int64)
    n_lost = _opt(dy.Int64)
    "The row's placed interval and how many of its steps were lost to a rollback."


class PlacedAttempts(AttemptFacts):
    """The attempts with the start of their first step."""

    t_first_step_start = _opt(dy.Int64)
    "When training started (the first step's start, or the end of start-up)."


class JobWindows(dy.Schema):
    """Each job's observed window, clipped to its own records."""

    job = _key()
    T0 = _opt(dy.Int64)
    T1 = _opt(dy.Int64)
    "First attempt's start, last attempt's end (µs)."


class IncidentRows(dy.Schema):
    """The incidents of a job group before naming (incidents.build_incidents and the recovery load)."""

    job = _key()
    incident = _key(dy.Int32)
    attempt = _key(dy.Int32)
    "Which interruption of which attempt."
    root_cause = _opt(dy.String)
    planned = _opt(dy.Bool)
    confidence = _opt(dy.String)
    reason = _opt(dy.String)
    "The cause found on the ladder, whether it was planned, how sure and why."
    symptoms = dy.List(dy.String(nullable=True), nullable=True)
    nodes = dy.List(dy.String(nullable=True), nullable=True)
    ranks = dy.List(dy.Int32(nullable=True), nullable=True)
    evidence = dy.List(dy.String(nullable=True), nullable=True)
    "The other classes seen, the nodes and ranks to blame, the records that say so."
    t_last_progress = _opt(dy.Int64)
    t_first_error = _opt(dy.Int64)
    t_detected = _opt(dy.Int64)
    t_restart = _opt(dy.Int64)
    t_resumed = _opt(dy.Int64)
    t_caught_up = _opt(dy.Int64)
    t_load_start = _opt(dy.Int64)
    t_load_end = _opt(dy.Int64)
    "Its phases (µs), and the next attempt's checkpoint load."
    lost_steps = _opt(dy.Int64)
    downtime_s = _opt(dy.Float64)
    "The steps lost and the time from the last progress to the resumption."


class LedgerBuckets(dy.Schema):
    """Per job, the observed time split into the ledger's buckets (ledger.compute)."""

    job = _key()
    T0 = _opt(dy.Int64)
    T1 = _opt(dy.Int64)
    t_obs_us = _opt(dy.Int64)
    "The observed window and its length (µs)."
    useful_us = _opt(dy.Int64)
    slowdown_us = _opt(dy.Int64)
    rework_us = _opt(dy.Int64)
    checkpoint_us = _opt(dy.Int64)
    eval_us = _opt(dy.Int64)
    detection_us = _opt(dy.Int64)
    recovery_us = _opt(dy.Int64)
    recovery_queue_us = _opt(dy.Int64)
    recovery_startup_us = _opt(dy.Int64)
    recovery_ckpt_load_us = _opt(dy.Int64)
    other_us = _opt(dy.Int64)
    "The buckets (µs; docs/tor.md), recovery split into queue, start-up and checkpoint load."
    steps_preserved = _opt(dy.Int64)
    steps_lost = _opt(dy.Int64)
    "Steps kept and steps lost to rollbacks."


class LedgerStepRows(PlacedStepRows):
    """Placed step rows with their share of the ledger (ledger.compute)."""

    owned_us = _opt(dy.Int64)
    ideal_us = _opt(dy.Int64)
    useful_us = _opt(dy.Int64)
    slowdown_us = _opt(dy.Int64)
    rework_us = _opt(dy.Int64)
    "The time the row owns and how it splits into ideal, useful, slowdown and rework (µs)."


class LostTime(dy.Schema):
    """Per attempt with lost steps, the rework its rollback discarded."""

    job = _key()
    attempt = _key(dy.Int32)
    lost_time_us = _opt(dy.Int64)
    "The attempt, and the µs of the step rows its rollback discarded (an incident's lost time)."


class AttemptRows(dy.Schema):
    """The attempts table of a job group before naming: times in µs (PlacedAttempts' facts too)."""

    job = _key()
    attempt = _key(dy.Int32)
    attempt_idx = _key(dy.Int32)
    job_id = _opt(dy.String)
    "Which attempt, and its scheduler id."
    t_start = _opt(dy.Int64)
    t_end = _opt(dy.Int64)
    state = _opt(dy.String)
    exit_code = _opt(dy.String)
    "When it ran and how it ended."
    first_step = _opt(dy.Int64)
    last_step = _opt(dy.Int64)
    resumed_from = _opt(dy.Int64)
    ckpt_loaded = _opt(dy.Int64)
    t_first_step_start = _opt(dy.Int64)
    t_last_step_end = _opt(dy.Int64)
    n_step_records = _opt(dy.UInt32)
    steps_lost = _opt(dy.Int64)
    "Its steps: range, resume point, checkpoint, first and last step times, rows, steps lost."


class SlowPeriodSuspects(SlowPeriodRows):
    """Slow periods with their suspects and the final ideal, numbered per job."""

    node = _opt(dy.String)
    rank = _opt(dy.Int32)
    evidence = dy.List(dy.String(nullable=True), nullable=True)
    "The node or rank suspected, and the records that point at it."
    ideal_us = _opt(dy.Int64)
    attempt = _key(dy.Int32)
    period = _key(dy.Int64)
    "The job's ideal step time, the attempt, the period's number within the job."


class SlowCost(dy.Schema):
    """Per slow period, the time its slowdown cost."""

    job = _key()
    period = _key(dy.Int64)
    slowdown_us = _opt(dy.Int64)
    "The period and the slowdown µs of its step rows."


class TorRows(LedgerBuckets):
    """One row per job: the ledger's buckets (µs), what the job was and how it ended."""

    path = _opt(dy.String)
    job_ids = dy.List(dy.String(nullable=True), nullable=True)
    identity = _opt(dy.String)
    "The job's directory, scheduler ids and identity (Jobs)."
    ideal_us = _opt(dy.Int64)
    ideal_step_source = _opt(dy.String)
    "Its ideal step time (IdealSteps)."
    state = _opt(dy.String)
    n_attempts = _opt(dy.UInt32)
    n_incidents = _opt(dy.UInt32)
    "The last attempt's end state, the attempts and the incidents."


class OnsetRecords(dy.Schema):
    """The records an interruption is judged on, with the ladder's flags (incidents._onset_records)."""

    job = _key()
    attempt_idx = _key(dy.Int32)
    t = _opt(dy.Int64)
    "The interrupted attempt and the record's time."
    kind = dy.Any()
    node = _opt(dy.String)
    rank = _opt(dy.Int32)
    state = _opt(dy.String)
    rule = _opt(dy.String)
    ev = _opt(dy.String)
    "What the record is, where it ran, its end state and rule, and its ``file:line``."
    cls = _opt(dy.String)
    priority = _opt(dy.Int64)
    "Its class (a rule's, or the one an end state is evidence of) and that class's causal priority."
    peer_symptom = _opt(dy.Bool)
    weak_rule = _opt(dy.Bool)
    soft = _opt(dy.Bool)
    "A peer's symptom; a job-level termination rule (WEAK_RULES); a warning-level record."
    collective_seq = _opt(dy.Int64)
    "The collective a watchdog timed out on (its sequence number)."
    is_planned = _opt(dy.Bool)
    is_failure = _opt(dy.Bool)
    is_strong = _opt(dy.Bool)
    is_strong_error = _opt(dy.Bool)
    is_weak = _opt(dy.Bool)
    is_kill = _opt(dy.Bool)
    "Ladder flags: planned stop, failure, specific failure (and error-level), weak, kill on a node."
    file = _opt(dy.String)
    line = _opt(dy.Int64)
    t_c = _opt(dy.Int64)
    inferred = _opt(dy.Bool)
    """Its file and line, its time on the reference clock (a skewed file's offset removed), and whether
    that time was placed from a neighbouring line."""
    is_link = _opt(dy.Bool)
    is_net_echo = _opt(dy.Bool)
    is_cause = _opt(dy.Bool)
    "Causal order: first-hand network evidence, other network errors, errors of other specific classes."


class InterruptionFacts(dy.Schema):
    """Per interruption, what its onset records say for each rung (incidents._ladder_facts); the
    rung functions of incidents.py read these columns."""

    job = _key()
    attempt_idx = _key(dy.Int32)
    state = _opt(dy.String)
    t_last_progress = _opt(dy.Int64)
    t_detected = _opt(dy.Int64)
    t_first_error = _opt(dy.Int64)
    "The interrupted attempt, its end state, last progress, detection and first error."
    ideal_step_us = _opt(dy.Int64)
    stall_us = _opt(dy.Int64)
    long_stall = _opt(dy.Bool)
    job_end_us = _opt(dy.Int64)
    "The job's ideal step, the stall before detection, whether it is a hang's, the job's end."
    n_onset_records = _opt(dy.UInt32)
    classes = dy.List(dy.String(nullable=True), nullable=True)
    "How many onset records, and their classes (weak last, by priority and time)."
    any_error = _opt(dy.Bool)
    any_own_error = _opt(dy.Bool)
    any_own_death = _opt(dy.Bool)
    any_kill = _opt(dy.Bool)
    any_node_failure = _opt(dy.Bool)
    any_own_node_failure = _opt(dy.Bool)
    "Rung 1: specific errors (``own``: not peers' symptoms), deaths, kills, node failures."
    first_error_cls = _opt(dy.String)
    first_own_error_cls = _opt(dy.String)
    first_strong_cls = _opt(dy.String)
    first_own_strong_cls = _opt(dy.String)
    "Rungs 1 and 2: the first error class and the first specific class (of any level)."
    any_hang = _opt(dy.Bool)
    any_collective_timeout = _opt(dy.Bool)
    "Rung 3: a hang detector, a collective timeout."
    outside_stop_cls = _opt(dy.String)
    first_planned_cls = _opt(dy.String)
    "Rung 4: the first stop from outside (walltime, preemption, maintenance), the first planned stop."
    any_failure = _opt(dy.Bool)
    any_weak = _opt(dy.Bool)
    any_weak_nonsignal = _opt(dy.Bool)
    "Rung 6: records of unknown cause, job-level termination records, such records other than signals."
    t_cause = _opt(dy.Int64)
    cause_file = _opt(dy.String)
    cause_line = _opt(dy.Int64)
    cause_cls = _opt(dy.String)
    cause_where = _opt(dy.String)
    """Causal order: the first failure of a specific non-network class and where it was logged, the
    class that explains the failures (first on the priority ladder) and its first record's rank and node."""
    t_net_echo = _opt(dy.Int64)
    net_file = _opt(dy.String)
    net_line = _opt(dy.Int64)
    net_placed = _opt(dy.Bool)
    n_net_echo = _opt(dy.UInt32)
    t_link = _opt(dy.Int64)
    """The first network error that is not first-hand, where, whether its time was placed, how many;
    the first port or link failing."""


def _table(name: str, schema: pl.Schema, doc: str) -> type[dy.Schema]:
    """A run table's contract from its schema constant (the one documented in docs/tables.md):
    every column, of its dtype, nulls allowed (the table's own rules say where)."""
    cols = {c: _opt(_dy_type(t)) for c, t in schema.items()}
    return type(name, (dy.Schema,), {"__doc__": doc, **cols})


def _dy_type(t: Any) -> Any:
    if isinstance(t, pl.Datetime):
        return functools.partial(dy.Datetime, time_zone=t.time_zone, time_unit=t.time_unit)
    if isinstance(t, pl.List):
        return functools.partial(dy.List, _dy_type(t.inner)(nullable=True))
    simple = {pl.String: dy.String, pl.Boolean: dy.Bool, pl.Float64: dy.Float64, pl.Int64: dy.Int64,
              pl.Int32: dy.Int32, pl.UInt32: dy.UInt32}
    return simple.get(t.base_type(), dy.Any)


AttemptsTable = _table("AttemptsTable", ATTEMPTS_SCHEMA, "The attempts table (docs/tables.md).")
IncidentsTable = _table("IncidentsTable", INCIDENTS_SCHEMA, "The incidents table (docs/tables.md).")
SlowPeriodsTable = _table("SlowPeriodsTable", SLOW_PERIODS_SCHEMA, "The slow periods table (docs/tables.md).")
TorTable = _table("TorTable", TOR_SCHEMA, "The TOR ledger table (docs/tables.md).")
ResourcesTable = _table("ResourcesTable", RESOURCES_SCHEMA, "Nodes and GPUs per attempt (docs/tables.md).")
# The run tables hold exactly their schema's columns, in its order.
RUN_TABLES: dict[type[dy.Schema], pl.Schema] = {
    AttemptsTable: ATTEMPTS_SCHEMA, IncidentsTable: INCIDENTS_SCHEMA, SlowPeriodsTable: SLOW_PERIODS_SCHEMA,
    TorTable: TOR_SCHEMA, ResourcesTable: RESOURCES_SCHEMA,
}

class ContractError(AssertionError):
    """A frame that does not match its contract."""


def check(frame: pl.DataFrame, contract: type[dy.Schema], where: str = "") -> pl.DataFrame:
    """``frame``, after checking that it holds the contract's columns, typed and nullable as it
    says, and no ``_`` column; and, for a run table, exactly its columns."""
    label = f"{where or 'frame'} as {contract.__name__}"
    hidden = [c for c in frame.columns if c.startswith("_")]
    if hidden:
        raise ContractError(f"{label}: temporary columns {hidden} left the function that made them")
    exact = RUN_TABLES.get(contract)
    if exact is not None and frame.schema != exact:
        raise ContractError(f"{label}: columns {dict(frame.schema)} are not {dict(exact)}")
    if exact is None and frame.height == 0:
        return frame  # a stage that found nothing may return a frame of fewer columns
    try:
        contract.validate(frame, cast=False)
    except Exception as exc:  # dataframely's schema and rule errors
        raise ContractError(f"{label}: {exc}") from exc
    return frame
