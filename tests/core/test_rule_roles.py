"""A rule's part in root-cause attribution is declared in rules/*.toml, and only there."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from toranalyze.errors import RulesError
from toranalyze.ingest.classify import (
    ROLES,
    attribution_roles,
    builtin_rules,
    load_rules,
    parse_rules_file,
    roles_of,
)
from toranalyze.model import SIM_CLASSES
from toranalyze.taxonomy import PLANNED, TAXONOMY

ROOT = Path(__file__).resolve().parents[2]
NO_IDS_UNDER = ("toranalyze/reconstruct", "toranalyze/simulate")


def test_no_rule_id_in_reconstruct_or_simulate() -> None:
    ids = [r.id for r in builtin_rules()]
    assert len(ids) > 100
    found = [
        f"{path.relative_to(ROOT)}: {rid}"
        for folder in NO_IDS_UNDER
        for path in sorted((ROOT / folder).rglob("*.py"))
        for rid in ids
        if rid in path.read_text(encoding="utf-8")
    ]
    assert not found, "declare the rule's role in rules/*.toml instead: " + ", ".join(found)


def test_roles_name_existing_rules_and_every_role_is_used() -> None:
    roles = attribution_roles()
    rules = {r.id: r for r in builtin_rules()}
    by_role = {"weak": roles.weak, "generic_gpu": roles.generic_gpu, "signal": roles.signal, "kill": roles.kill,
               "link": roles.link}
    assert set(by_role) == set(ROLES)
    for role, ids in by_role.items():
        assert ids, f"no built-in rule has role {role!r}"
        assert set(ids) <= set(rules), role
        assert all(role in rules[i].roles for i in ids), role
    # signal and kill qualify weak records; generic_gpu qualifies GPU classes
    assert set(roles.signal) | set(roles.kill) <= set(roles.weak)
    assert {TAXONOMY[rules[i].failure_class].category for i in roles.generic_gpu} == {"gpu"}
    # link marks first-hand network evidence
    assert {rules[i].failure_class for i in roles.link} == {"network"}


def test_reconstruct_reads_the_declared_roles() -> None:
    from toranalyze.reconstruct import attribution, incidents

    roles = attribution_roles()
    assert incidents.WEAK_RULES == roles.weak
    assert incidents.GENERIC_GPU_RULES == roles.generic_gpu
    assert incidents.SIGNAL_RULES == roles.signal
    assert attribution.KILL_RULES == roles.kill
    assert attribution.LINK_RULES == roles.link
    assert attribution.PEER_SYMPTOM == roles.peer_symptom
    assert incidents.STATE_CLASS == dict(roles.state_class)


def test_end_states_are_of_taxonomy_classes() -> None:
    states = attribution_roles().state_class
    assert {"NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "PREEMPTED", "OOMKilled", "Evicted"} <= set(states)
    assert set(states.values()) <= set(TAXONOMY)


PEERS = [
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    "NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error",
    "RuntimeError: [2] is setting up NCCL communicator and retrieving ncclUniqueId: Connection reset by peer",
    "Connection closed by remote peer 10.0.0.7<45321>",
    "Connection closed by peer",
    "[E socket.cpp:860] recv failed: Broken pipe",
    "NCCL WARN Net : Socket recv failed",
    "gloo: peer closed connection",
]
NOT_PEERS = [
    "NET/IB : Got completion from peer 10.0.0.7<52345> with status=12 opcode=0 len=0 vendor err 129",
    "NCCL WARN Net : Connect to 10.0.0.7<43211> failed : Connection refused",
    "connect: No route to host",
    "mlx5_core 0000:3b:00.0: Port module event: module 0, Cable unplugged",
]


def test_peer_symptom_pattern_matches_what_it_is_meant_for() -> None:
    pattern = attribution_roles().peer_symptom
    assert all(re.search(pattern, m) for m in PEERS)
    assert not any(re.search(pattern, m) for m in NOT_PEERS)
    # polars (Rust regex) reads it the same way
    got = pl.Series(PEERS + NOT_PEERS).str.contains(pattern).to_list()
    assert got == [True] * len(PEERS) + [False] * len(NOT_PEERS)


RULE = '[[rule]]\nid = "x"\nclass = "{cls}"\nmatch = "a"\n{extra}\n'


@pytest.mark.parametrize("text,needle", [
    (RULE.format(cls="software", extra='role = ["feeble"]'), "unknown role 'feeble'"),
    (RULE.format(cls="unknown", extra='role = ["kill"]'), "add role 'weak'"),
    (RULE.format(cls="software", extra='role = ["weak", "generic_gpu"]'), "needs a GPU class"),
    (RULE.format(cls="software", extra="role = [1.5]"), "role must be"),
    ('[[state]]\nstate = "NODE_FAIL"\nclass = "node_death"\n', "unknown class 'node_death'"),
    ('[[state]]\nstate = "NODE_FAIL"\n', "needs 'state' and 'class'"),
    ('[[state]]\nstate = "NODE_FAIL"\nclass = "node_failure"\nrole = ["weak"]\n', "unknown keys"),
    ("[peer_symptom]\nmatch = '('\n", "bad regex"),
    ("[peer_symptom]\npattern = 'a'\n", "needs 'match'"),
    # roles belong on the rule itself: a table naming rule ids elsewhere is refused
    ('[roles]\nweak = ["no-such-rule"]\n', "unknown tables or keys \\['roles'\\]"),
])
def test_malformed_roles_are_refused_with_the_file(text: str, needle: str) -> None:
    with pytest.raises(RulesError, match=needle) as info:
        parse_rules_file(text, "bad.toml")
    assert "bad.toml" in (info.value.path or "")


def test_a_users_rules_file_cannot_declare_roles(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(RULE.format(cls="software", extra='role = ["weak"]'))
    with pytest.raises(RulesError, match="built-in rules only") as info:
        load_rules([str(mine)])
    assert info.value.path == str(mine)
    mine.write_text(RULE.format(cls="software", extra=""))
    assert load_rules([str(mine)])[0].roles == ()


def test_end_states_and_the_peer_pattern_have_one_home() -> None:
    peer = parse_rules_file("[peer_symptom]\nmatch = 'x'\n", "a.toml")
    state = parse_rules_file('[[state]]\nstate = "S"\nclass = "walltime"\n', "b.toml")
    again = parse_rules_file('[[state]]\nstate = "S"\nclass = "walltime"\n', "c.toml")
    assert roles_of([peer, state]).state_class == {"S": "walltime"}
    with pytest.raises(RulesError, match="'S' is declared twice \\(b.toml and c.toml\\)"):
        roles_of([peer, state, again])
    with pytest.raises(RulesError, match="found 2") as info:
        roles_of([peer, parse_rules_file("[peer_symptom]\nmatch = 'y'\n", "d.toml")])
    assert info.value.path == "a.toml, d.toml"
    with pytest.raises(RulesError, match="found 0"):
        roles_of([state])


# --- The simulator's emitters are classified as its truth says --------------------------------

# Every class the simulator draws, scripted once, ten minutes of up-time apart so that one
# incident's records do not reach into the next one's window; the final attempt runs into the
# time limit. Two small nodes and short steps keep the run fast.
_RUN = {
    "nodes": 2, "gpus_per_node": 2, "spare_nodes": 6, "duration": "240m", "walltime": "25m",
    "step_time": 2.0, "ckpt_interval_steps": 50, "ckpt_save": 5.0, "startup": [10.0, 20.0],
    "ckpt_load": [5.0, 10.0], "queue_wait": [20.0, 60.0], "watchdog_timeout": "2m",
    "nan_run_on": ["1m", "2m"], "nccl_chatter": 6, "slow_rate_per_hour": 0.0,
}
# The sources' clocks are their own (ingest does not align them) and NaN losses run for up to two
# minutes before the stop: the window opens well before the last progress.
_PRE, _POST = pl.duration(seconds=240), pl.duration(seconds=120)


@pytest.fixture(scope="module", params=["slurm", "kubernetes"])
def simulated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[pl.DataFrame, list]:
    """A fresh run of one flavour: its classified records (``cls``) and its true incidents."""
    from toranalyze.ingest.pipeline import ingest
    from toranalyze.simulate.command import run_simulation

    flavor, out = request.param, tmp_path_factory.mktemp(request.param)
    data = {
        "run": {**_RUN, "name": f"roles-{flavor}", "flavor": flavor},
        "detection": {"hang": ["2m", "4m"]},
        "script": [{"at": f"{10 * (i + 1)}m", "class": c} for i, c in enumerate(SIM_CLASSES)],
    }
    run_simulation(out, 2311, data, None)
    truth = json.loads((out / "truth.json").read_text())["jobs"][0]["incidents"]
    ev = ingest([str(out)]).events
    # A scheduler / pod end no rule classified still counts by its state (the [[state]] tables);
    # a container stopped by SIGTERM (exit 143) with no other reason is the incident stage's
    # user cancel.
    state_cls = pl.col("state").replace_strict(dict(attribution_roles().state_class), default=None,
                                               return_dtype=pl.String)
    sigterm = (pl.col("source") == "kubernetes") & (pl.col("code") == "143") & (pl.col("state") == "Error")
    end_cls = pl.when(sigterm).then(pl.lit("user_cancel")).otherwise(state_cls)
    cls = pl.coalesce("failure_class", pl.when(pl.col("kind") == "job_end").then(end_cls)).alias("cls")
    peer = pl.col("message").fill_null("").str.contains(attribution_roles().peer_symptom).alias("peer")
    ev = ev.with_columns(cls, peer).filter(pl.col("cls").is_not_null())
    return ev.select("ts", "source", "kind", "code", "cls", "rule", "peer", "message"), truth


def _window(ev: pl.DataFrame, inc: dict) -> pl.DataFrame:
    def at(s: str) -> pl.Expr:
        return pl.lit(s).str.to_datetime(time_zone="UTC").cast(pl.Datetime("us", "UTC"))

    return ev.filter(pl.col("ts").is_between(at(inc["t_last_progress"]) - _PRE, at(inc["t_detected"]) + _POST))


def _role_problem(cause: str, w: pl.DataFrame) -> str | None:
    """What in an incident's window contradicts its true root cause under the rule roles."""
    roles = attribution_roles()
    rule = pl.col("rule").fill_null("")
    weak = rule.is_in(roles.weak)
    failing = w.filter(~pl.col("cls").is_in([*PLANNED, "hang"]))
    if cause == "unknown":  # only weak records: the lowest rung
        return None if failing.height and failing["rule"].is_in(roles.weak).all() else "not only weak records"
    if cause == "hang":  # a stall ended from outside: no failure but the watchdog's, any weak record a signal
        if failing.filter(~weak & (pl.col("cls") != "collective_timeout")).height:
            return "a failure record"
        return None if failing.filter(weak & ~rule.is_in(roles.signal)).is_empty() else "a weak non-signal record"
    deciding = w.filter((pl.col("cls") == cause) & ~weak)
    if TAXONOMY[cause].category == "gpu":  # a generic CUDA text alone would give way to a node failure
        deciding = deciding.filter(~rule.is_in(roles.generic_gpu))
    if cause == "network":  # peers' symptoms are never a cause of their own
        deciding = deciding.filter(~pl.col("peer"))
    return None if deciding.height else f"no deciding record of class {cause}"


def test_simulated_evidence_is_classified_as_the_truth_says(simulated: tuple[pl.DataFrame, list]) -> None:
    ev, truth = simulated
    assert {inc["root_cause"] for inc in truth} == set(SIM_CLASSES) | {"walltime"}
    problems = [f"{inc['root_cause']} at {inc['t_last_progress']}: {p}"
                for inc in truth if (p := _role_problem(inc["root_cause"], _window(ev, inc)))]
    assert not problems, problems


def test_simulated_records_carry_their_roles(simulated: tuple[pl.DataFrame, list]) -> None:
    """The launcher's signal exits, the generic CUDA failure and the peers' reports the simulator
    writes get the rules whose roles attribution relies on."""
    ev, _ = simulated
    roles = attribution_roles()
    signalled = ev.filter((pl.col("source") == "trainer") & (pl.col("kind") == "error")
                          & pl.col("code").is_in(["-9", "-15"]))
    assert signalled.height and signalled["rule"].is_in(roles.signal).all()
    assert signalled.filter(pl.col("code") == "-9")["rule"].is_in(roles.kill).all()
    generic = ev.filter(pl.col("message").str.contains("CUDA error: unknown error") & (pl.col("cls") == "gpu_hardware"))
    assert generic.height and generic["rule"].is_in(roles.generic_gpu).all()
    remote = ev.filter(pl.col("message").str.contains("ncclRemoteError"))
    assert remote.height and remote["peer"].all()
