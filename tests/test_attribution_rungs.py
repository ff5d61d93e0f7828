"""Each rung of the root-cause ladder (reconstruct/incidents.py) alone, on small hand-made frames of
interruption facts (contract InterruptionFacts)."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from toranalyze.reconstruct import incidents as inc

# A quiet interruption: nothing on record, no stall, a failed end.
QUIET: dict[str, Any] = {
    "state": "FAILED", "any_error": False, "any_own_error": False, "any_own_death": False, "any_kill": False,
    "any_node_failure": False, "any_own_node_failure": False, "first_error_cls": None, "first_own_error_cls": None,
    "first_strong_cls": None, "first_own_strong_cls": None, "any_hang": False, "any_collective_timeout": False,
    "outside_stop_cls": None, "first_planned_cls": None, "any_failure": False, "any_weak": False,
    "any_weak_nonsignal": False, "long_stall": False,
    "t_cause": None, "cause_file": None, "cause_line": None, "cause_cls": None,
    "cause_where": None, "t_net_echo": None, "net_file": None, "net_line": None, "net_placed": False, "t_link": None,
    "net_explained": False, "failure_explains_network": False,
}
INTS = {"t_cause", "cause_line", "t_net_echo", "net_line", "t_link"}


def facts(**changes: Any) -> pl.DataFrame:
    """One interruption's facts: QUIET's with ``changes`` (flags Boolean, the rest text)."""
    row = {**QUIET, **changes}
    flags = {k for k, v in row.items() if isinstance(v, bool) or isinstance(QUIET.get(k), bool)}
    return pl.DataFrame([row], schema={k: pl.Boolean if k in flags else pl.Int64 if k in INTS else pl.String
                                       for k in row})


def value(frame: pl.DataFrame, expr: pl.Expr) -> Any:
    return frame.select(expr).item()


def test_peers_symptoms_are_set_aside_next_to_a_node_local_death() -> None:
    f = facts(any_error=True, any_own_error=True, any_own_death=True, first_error_cls="network",
              first_own_error_cls="node_failure")
    assert value(f, inc.peers_demoted())
    assert value(f.with_columns(peers_demoted=pl.lit(True)), inc.rung1_error_class()) == "node_failure"
    assert not value(f, inc.killed_by_signal())


def test_peers_symptoms_and_a_kill_are_a_process_killed_by_a_signal() -> None:
    f = facts(any_error=True, any_kill=True, first_error_cls="network")
    assert value(f, inc.killed_by_signal())
    assert value(f, inc.peers_demoted())


def test_rung1_takes_the_first_error_class_of_all_records_when_peers_count() -> None:
    f = facts(any_error=True, first_error_cls="network", peers_demoted=False)
    assert value(f, inc.rung1_error_class()) == "network"
    assert value(facts(peers_demoted=False), inc.rung1_error_class()) is None


def test_rung1_gpu_swap_needs_generic_records_next_to_a_node_failure() -> None:
    base = {"rung": "error", "error_cls": "gpu_hardware", "node_failure_seen": True}
    f = facts(**base, error_cls_specific=False)
    assert value(f, inc.rung1_gpu_swap())
    assert not value(facts(**base, error_cls_specific=True), inc.rung1_gpu_swap())
    assert not value(facts(**{**base, "node_failure_seen": False}, error_cls_specific=False), inc.rung1_gpu_swap())


def test_rung1_nan_losses_stopped_by_a_planned_stop_are_that_stop() -> None:
    f = facts(rung="error", error_cause="numerics", outside_stop_cls="walltime")
    assert value(f, inc.rung1_nan_stop())
    assert not value(facts(rung="error", error_cause="numerics"), inc.rung1_nan_stop())


def test_rung2_takes_the_first_specific_warning_class() -> None:
    f = facts(first_strong_cls="network", first_own_strong_cls="gpu_memory")
    assert value(f.with_columns(peers_demoted=pl.lit(False)), inc.rung2_warning_class()) == "network"
    assert value(f.with_columns(peers_demoted=pl.lit(True)), inc.rung2_warning_class()) == "gpu_memory"


@pytest.mark.parametrize(("hang", "coll", "want"), [(True, True, "hang"), (False, True, "collective_timeout"),
                                                    (False, False, None)])
def test_rung3_a_hang_detector_before_a_collective_timeout(hang: bool, coll: bool, want: str | None) -> None:
    assert value(facts(any_hang=hang, any_collective_timeout=coll), inc.rung3_detector()) == want


def test_rung4_a_walltime_after_a_long_stall_is_a_hang_detected_by_the_kill() -> None:
    assert value(facts(first_planned_cls="preemption"), inc.rung4_planned_class()) == "preemption"
    assert value(facts(rung="planned", first_planned_cls="walltime", long_stall=True), inc.rung4_kill_hang())
    assert not value(facts(rung="planned", first_planned_cls="walltime"), inc.rung4_kill_hang())
    assert not value(facts(rung="planned", first_planned_cls="preemption", long_stall=True), inc.rung4_kill_hang())


@pytest.mark.parametrize(("state", "clean"), [("COMPLETED", True), ("Succeeded", True), ("FAILED", False),
                                              (None, False)])
def test_rung5_a_clean_exit(state: str | None, clean: bool) -> None:
    assert value(facts(state=state), inc.rung5_clean_exit()) is clean


@pytest.mark.parametrize(("changes", "want"), [
    ({"any_failure": True}, "fail"),
    ({"long_stall": True, "any_weak": True}, "stall"),  # only kill signals after a long stall
    ({"long_stall": True, "any_weak": True, "any_weak_nonsignal": True}, "weak"),
    ({"any_weak": True}, "weak"),
    ({}, "none"),
])
def test_rung6_weak_records_and_stalls(changes: dict[str, Any], want: str) -> None:
    assert value(facts(**changes), inc.rung6_weak()) == want


@pytest.mark.parametrize(("changes", "rung"), [
    ({"any_error": True, "any_kill": True, "first_error_cls": "network"}, "killed"),
    ({"any_error": True, "any_own_error": True, "first_error_cls": "oom_gpu", "any_hang": True}, "error"),
    ({"first_strong_cls": "network", "any_hang": True}, "warning"),
    ({"any_collective_timeout": True, "first_planned_cls": "walltime"}, "collective_timeout"),
    ({"first_planned_cls": "preemption", "state": "COMPLETED"}, "planned"),
    ({"state": "COMPLETED", "any_failure": True}, "clean"),
    ({"any_weak": True}, "weak"),
])
def test_the_ladder_takes_the_first_rung_that_applies(changes: dict[str, Any], rung: str) -> None:
    assert inc._with_rung(facts(**changes))["rung"].item() == rung


S = 1_000_000


def test_a_failure_before_the_network_errors_explains_them() -> None:
    """One rank raises, then its peers report NCCL/IB errors: the errors are echoes (other files
    within a second count as the same moment; in one file the line order decides)."""
    f = facts(t_cause=10 * S, cause_file="a.log", cause_line=5, cause_cls="software", t_net_echo=11 * S,
              net_file="b.log", net_line=9)
    assert value(f, inc.net_explained())
    assert value(f.with_columns(t_net_echo=pl.lit(10 * S + S // 2)), inc.net_explained())  # same moment
    assert not value(f.with_columns(t_net_echo=pl.lit(8 * S)), inc.net_explained())  # network first
    # a network record timed from the line above it (unstamped console output) is not provably first
    assert value(f.with_columns(t_net_echo=pl.lit(8 * S), net_placed=pl.lit(True)), inc.net_explained())
    same = f.with_columns(net_file=pl.lit("a.log"), t_net_echo=pl.lit(10 * S))
    assert value(same.with_columns(net_line=pl.lit(7)), inc.net_explained())
    assert not value(same.with_columns(net_line=pl.lit(3)), inc.net_explained())


def test_a_port_failing_before_the_death_keeps_the_network_as_cause() -> None:
    f = facts(t_cause=10 * S, cause_file="a.log", cause_line=5, cause_cls="software", t_net_echo=11 * S,
              net_file="b.log", net_line=9, t_link=5 * S)
    assert not value(f, inc.net_explained())
    assert value(f.with_columns(t_link=pl.lit(12 * S)), inc.net_explained())  # the link went down after


def test_no_network_error_at_all_is_no_explanation() -> None:
    assert not value(facts(t_cause=10 * S, cause_file="a.log", cause_line=1, cause_cls="oom_gpu"), inc.net_explained())


def test_the_explaining_failure_decides_only_when_the_network_is_explained() -> None:
    explained = facts(cause_cls="software", net_explained=True, t_net_echo=3 * S)
    assert value(explained, inc.failure_explains_network())
    assert not value(facts(cause_cls="storage"), inc.failure_explains_network())  # no network record: the ladder
    assert not value(facts(cause_cls="software", t_net_echo=3 * S), inc.failure_explains_network())  # network first
    assert not value(facts(net_explained=True), inc.failure_explains_network())  # no cause


def test_rung1_takes_the_failure_that_explains_the_network_errors() -> None:
    f = facts(any_error=True, first_error_cls="network", first_own_error_cls="gpu_memory", cause_cls="software",
              failure_explains_network=True, peers_demoted=True)
    assert value(f, inc.rung1_error_class()) == "software"
    assert value(f.with_columns(failure_explains_network=pl.lit(False)), inc.rung1_error_class()) == "gpu_memory"


def test_explained_network_errors_are_demoted_like_peers_symptoms() -> None:
    f = facts(any_error=True, any_own_error=True, net_explained=True)
    assert value(f, inc.peers_demoted())
