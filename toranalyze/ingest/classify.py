"""Classification rules as data: patterns -> failure_class.

Rules live in TOML files (built-ins in ``toranalyze/rules/*.toml``, one per
log family, loaded in name order; users add theirs with ``--rules FILE``, which
are tried *before* the built-ins so a user can override them). A rule::

    [[rule]]
    id = "xid-79"                  # unique, shown in events.rule and in reports
    class = "gpu_hardware"         # a failure class of TAXONOMY
    source = ["kernel"]            # optional: only rows of these sources
    kind = ["error"]               # optional: only rows of these kinds
    code = ["79"]                  # optional: code column equals one of these
    state = ["NODE_FAIL"]          # optional: state column equals one of these
    match = '(?i)fallen off the bus'  # optional: regex searched in message
    severity = "critical"          # optional: overrides the row's severity
    role = ["weak"]                # optional: its part in root-cause attribution (ROLES)
    anywhere = true                # optional: its match alone names the failure, in any file:
                                   # searched on lines no parser claimed (ingest/vocabulary.py)

Every condition given must hold; a rule needs at least one of match/code/state.
The first matching rule wins. Rows no rule matches keep failure_class null.

Root-cause attribution (toranalyze/reconstruct) reads what it needs to know about rules from
the built-in files, through ``attribution_roles()``, never by naming a rule in Python:

* ``role`` of a rule: ``weak`` (only says the job or a worker ended badly: the ladder's lowest
  rung), ``generic_gpu`` (a GPU-class rule on a generic CUDA failure text, no Xid or counter),
  ``signal`` (a weak record of processes killed from outside by a signal), ``kill`` (a weak
  record of a process killed on one node: the death when only peers' symptoms are left),
  ``link`` (a network-class rule on first-hand evidence of a link, port or adapter failing: a
  port down, a link flap, an adapter's fatal event; never a peer's echo of a death elsewhere);
* ``[[state]]`` tables (``state = "NODE_FAIL"``, ``class = "node_failure"``): a scheduler or pod
  end state that is evidence of that class when no rule classified its row;
* one ``[peer_symptom]`` table (``match = '...'``): the text of network records that only say a
  peer went away.

Only the built-in files declare these; a ``--rules`` file that does is refused.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType

import polars as pl

from toranalyze.errors import RulesError
from toranalyze.schema import SEVERITIES
from toranalyze.taxonomy import TAXONOMY

_KEYS = {"id", "class", "source", "kind", "code", "state", "match", "severity", "note", "role", "anywhere"}
_STATE_KEYS = {"state", "class", "note"}
_PEER_KEYS = {"match", "note"}
_TOP_KEYS = {"rule", "state", "peer_symptom"}
# A rule's possible parts in root-cause attribution (see the module docstring).
ROLES = ("weak", "generic_gpu", "signal", "kill", "link")
# Roles that only qualify weak records: without 'weak' they would change nothing.
_WEAK_ONLY = ("signal", "kill")


@dataclass(frozen=True)
class Rule:
    id: str
    failure_class: str
    origin: str
    source: tuple[str, ...] = ()
    kind: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    state: tuple[str, ...] = ()
    match: str | None = None
    severity: str | None = None
    roles: tuple[str, ...] = ()
    anywhere: bool = False

    def condition(self) -> pl.Expr:
        cond = pl.lit(True)
        if self.source:
            cond &= pl.col("source").is_in(self.source)
        if self.kind:
            cond &= pl.col("kind").is_in(self.kind)
        if self.code:
            cond &= pl.col("code").is_in(self.code)
        if self.state:
            cond &= pl.col("state").is_in(self.state)
        if self.match:
            cond &= pl.col("message").str.contains(self.match)
        return cond.fill_null(False)


def _as_tuple(value: object, key: str, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str | int):
        return (str(value),)
    if isinstance(value, list) and all(isinstance(v, str | int) for v in value):
        return tuple(str(v) for v in value)
    raise RulesError(f"{key} must be a string or a list of strings", path=where)


@dataclass(frozen=True)
class RulesFile:
    """One parsed rules file: its rules, its end states (state -> class) and its peer-symptom
    pattern, if it declares one."""

    origin: str
    rules: tuple[Rule, ...]
    states: tuple[tuple[str, str], ...] = ()
    peer_symptom: str | None = None

    def declares_roles(self) -> bool:
        return bool(self.states or self.peer_symptom or any(r.roles for r in self.rules))


def _compiled(pattern: str, what: str, where: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise RulesError(f"{what}: bad regex: {exc}", path=where) from exc
    return pattern


def _roles(item: dict, rid: str, cls: str, where: str) -> tuple[str, ...]:
    roles = _as_tuple(item.get("role"), "role", where)
    for role in roles:
        if role not in ROLES:
            raise RulesError(f"rule {rid!r}: unknown role {role!r}", path=where, hint=f"use one of: {', '.join(ROLES)}")
        if role in _WEAK_ONLY and "weak" not in roles:
            raise RulesError(f"rule {rid!r}: role {role!r} qualifies weak records; add role 'weak'", path=where)
    if "link" in roles and cls != "network":
        raise RulesError(f"rule {rid!r}: role 'link' needs class 'network', not {cls!r}", path=where)
    if "generic_gpu" in roles and TAXONOMY[cls].category != "gpu":
        raise RulesError(f"rule {rid!r}: role 'generic_gpu' needs a GPU class, not {cls!r}", path=where)
    return roles


def _anywhere(item: dict, rid: str, where: str) -> bool:
    value = item.get("anywhere", False)
    if not isinstance(value, bool):
        raise RulesError(f"rule {rid!r}: anywhere must be true or false", path=where)
    if value and not item.get("match"):
        raise RulesError(f"rule {rid!r}: anywhere needs a match pattern (it is searched in text)", path=where)
    return value


def _rule(item: dict, origin: str, where: str) -> Rule:
    unknown = set(item) - _KEYS
    if unknown:
        raise RulesError(f"unknown keys {sorted(unknown)}", path=where, hint=f"allowed keys: {sorted(_KEYS)}")
    rid = item.get("id")
    cls = item.get("class")
    if not rid or not cls:
        raise RulesError("a rule needs 'id' and 'class'", path=where)
    if cls not in TAXONOMY:
        raise RulesError(f"unknown class {cls!r}", path=where, hint=f"use one of: {', '.join(TAXONOMY)}")
    match = item.get("match")
    if match is not None:
        _compiled(match, f"rule {rid!r}", where)
    sev = item.get("severity")
    if sev is not None and sev not in SEVERITIES:
        raise RulesError(f"rule {rid!r}: unknown severity {sev!r}", path=where)
    rule = Rule(
        id=rid,
        failure_class=cls,
        origin=origin,
        source=_as_tuple(item.get("source"), "source", where),
        kind=_as_tuple(item.get("kind"), "kind", where),
        code=_as_tuple(item.get("code"), "code", where),
        state=_as_tuple(item.get("state"), "state", where),
        match=match,
        severity=sev,
        roles=_roles(item, rid, cls, where),
        anywhere=_anywhere(item, rid, where),
    )
    if not (rule.match or rule.code or rule.state):
        raise RulesError(f"rule {rid!r} needs at least one of match, code, state", path=where)
    return rule


def _state(item: dict, where: str) -> tuple[str, str]:
    unknown = set(item) - _STATE_KEYS
    if unknown:
        raise RulesError(f"unknown keys {sorted(unknown)}", path=where, hint=f"allowed keys: {sorted(_STATE_KEYS)}")
    state, cls = item.get("state"), item.get("class")
    if not isinstance(state, str) or not state or not isinstance(cls, str):
        raise RulesError("an end state needs 'state' and 'class' (strings)", path=where)
    if cls not in TAXONOMY:
        raise RulesError(f"state {state!r}: unknown class {cls!r}", path=where,
                         hint=f"use one of: {', '.join(TAXONOMY)}")
    return state, cls


def _peer_symptom(item: object, where: str) -> str | None:
    if item is None:
        return None
    if not isinstance(item, dict) or set(item) - _PEER_KEYS or not isinstance(item.get("match"), str):
        raise RulesError("[peer_symptom] needs 'match' (a regex) and may have 'note'", path=where)
    return _compiled(item["match"], "peer_symptom", where)


def parse_rules_file(text: str, origin: str) -> RulesFile:
    """A rules file's ``[[rule]]`` and ``[[state]]`` tables and its ``[peer_symptom]``, checked."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"not valid TOML: {exc}", path=origin, hint="fix the syntax; see docs/rules.md") from exc
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise RulesError(f"unknown tables or keys {sorted(unknown)}", path=origin,
                         hint=f"a rules file holds only: {', '.join(sorted(_TOP_KEYS))}")
    rules = tuple(_rule(item, origin, f"{origin} (rule #{i})") for i, item in enumerate(doc.get("rule", []), 1))
    states = tuple(_state(item, f"{origin} (state #{i})") for i, item in enumerate(doc.get("state", []), 1))
    return RulesFile(origin, rules, states, _peer_symptom(doc.get("peer_symptom"), f"{origin} [peer_symptom]"))


def parse_rules(text: str, origin: str) -> list[Rule]:
    """The rules of a rules file (its other tables checked, not returned)."""
    return list(parse_rules_file(text, origin).rules)


def _builtin_files() -> list[RulesFile]:
    """The built-in rules files, in name order."""
    folder = resources.files("toranalyze") / "rules"
    entries = sorted((e for e in folder.iterdir() if e.name.endswith(".toml")), key=lambda e: e.name)
    return [parse_rules_file(e.read_text(encoding="utf-8"), f"builtin:{e.name}") for e in entries]


def builtin_rules() -> list[Rule]:
    return [r for f in _builtin_files() for r in f.rules]


def load_rules(user_files: list[str] | tuple[str, ...] = ()) -> list[Rule]:
    """User rules first (they win), then the built-ins. Ids must be unique."""
    rules: list[Rule] = []
    for f in user_files:
        try:
            text = Path(f).read_text(encoding="utf-8")
        except OSError as exc:
            raise RulesError(f"cannot read rules file: {exc}", path=f) from exc
        parsed = parse_rules_file(text, f)
        if parsed.declares_roles():
            raise RulesError("attribution roles, end states and peer symptoms are read from the built-in rules only",
                             path=f, hint="drop 'role', [[state]] and [peer_symptom] from this file")
        rules.extend(parsed.rules)
    rules.extend(builtin_rules())
    seen: dict[str, str] = {}
    for r in rules:
        if r.id in seen:
            raise RulesError(f"rule id {r.id!r} is defined twice ({seen[r.id]} and {r.origin})", path=r.origin)
        seen[r.id] = r.origin
    return rules


@dataclass(frozen=True)
class AttributionRoles:
    """What root-cause attribution needs to know about the rules: the ids of the rules of each
    role, the peer-symptom pattern, and end state -> class."""

    weak: tuple[str, ...]
    generic_gpu: tuple[str, ...]
    signal: tuple[str, ...]
    kill: tuple[str, ...]
    link: tuple[str, ...]
    peer_symptom: str
    state_class: Mapping[str, str]


def roles_of(files: Sequence[RulesFile]) -> AttributionRoles:
    """The roles declared in ``files``; an end state declared twice, a second peer-symptom
    pattern or none at all is refused."""
    rules = [r for f in files for r in f.rules]
    states: dict[str, str] = {}
    where: dict[str, str] = {}
    peers = [(f.origin, f.peer_symptom) for f in files if f.peer_symptom is not None]
    for f in files:
        for state, cls in f.states:
            if state in states:
                raise RulesError(f"end state {state!r} is declared twice ({where[state]} and {f.origin})",
                                 path=f.origin)
            states[state], where[state] = cls, f.origin
    if len(peers) != 1:
        raise RulesError(f"exactly one rules file must declare [peer_symptom], found {len(peers)}",
                         path=", ".join(o for o, _ in peers) or None)

    def having(role: str) -> tuple[str, ...]:
        return tuple(r.id for r in rules if role in r.roles)

    return AttributionRoles(weak=having("weak"), generic_gpu=having("generic_gpu"), signal=having("signal"),
                            kill=having("kill"), link=having("link"), peer_symptom=peers[0][1],
                            state_class=MappingProxyType(states))


@lru_cache(maxsize=1)
def attribution_roles() -> AttributionRoles:
    """The roles of the built-in rules (read once)."""
    return roles_of(_builtin_files())


def applicable(rules: list[Rule], events: pl.DataFrame) -> list[Rule]:
    """The rules whose source and kind conditions some row of ``events`` meets, in order.

    Dropping a rule that no row can meet changes no row's first matching rule; one file's events
    come from a few (source, kind) pairs, so its chain is a fraction of all the rules."""
    pairs = set(events.select("source", "kind").unique().iter_rows())
    return [r for r in rules if any(_meets(r, src, kind) for src, kind in pairs)]


def _meets(rule: Rule, source: str | None, kind: str | None) -> bool:
    """Whether rows of this source and kind meet the rule's source and kind conditions."""
    return (not rule.source or source in rule.source) and (not rule.kind or kind in rule.kind)


def pair_key() -> pl.Expr:
    """One string per (source, kind) pair (a null kept apart from every string)."""
    return pl.concat_str([pl.col(c).fill_null("\x00null") for c in ("source", "kind")], separator="\x00")


Chain = tuple[tuple[int, Rule], ...]


def event_pairs(events: pl.DataFrame) -> list[tuple[str | None, str | None, str]]:
    """The (source, kind, ``pair_key``) triples of ``events``."""
    return list(events.select("source", "kind", pair_key().alias("_k")).unique("_k").iter_rows())


def chains_by_pair(
    rules: Sequence[tuple[int, Rule]], pairs: Sequence[tuple[str | None, str | None, str]]
) -> dict[Chain, list[str]]:
    """The rules of ``rules`` (numbered) that rows of each pair (``event_pairs``) can meet, as
    chain -> the ``pair_key`` values that meet exactly that chain (empty chains left out).

    A row never meets a rule of another pair's chain, so a chain tried only on its pairs' rows
    finds each row's first matching rule; a block mixing step rows (few rules) with error rows
    (dozens) then tries on each row only its own few."""
    out: dict[Chain, list[str]] = {}
    for src, kind, key in pairs:
        chain = tuple((pos, r) for pos, r in rules if _meets(r, src, kind))
        if chain:
            out.setdefault(chain, []).append(key)
    return out


def first_rule(rules: Sequence[tuple[int, Rule]]) -> pl.Expr:
    """The position (as numbered in ``rules``) of the first rule each row meets; null if none.
    One pass of when-chains."""
    return _first_rule(tuple(rules))


@lru_cache(maxsize=512)
def _first_rule(rules: tuple[tuple[int, Rule], ...]) -> pl.Expr:
    # Cached: the files of one run meet the same few rule chains, and building a chain of
    # hundreds of conditions in Python cost more than matching a small file's events.
    idx: pl.Expr = pl.lit(None, pl.Int32)
    for pos, rule in reversed(rules):
        idx = pl.when(rule.condition()).then(pl.lit(pos, pl.Int32)).otherwise(idx)
    return idx


def labelled(lf: pl.LazyFrame, rules: list[Rule], index: pl.Expr) -> pl.LazyFrame:
    """failure_class, rule and severity overrides from ``index``, a position in ``rules``."""
    positions, classes, ids, severities = _lookups(tuple(rules))

    def of(values: pl.Series) -> pl.Expr:
        return index.replace_strict(positions, values, default=None)

    return lf.with_columns(
        of(classes).alias("failure_class"),
        of(ids).alias("rule"),
        pl.coalesce(of(severities), pl.col("severity")).alias("severity"),
    )


@lru_cache(maxsize=8)
def _lookups(rules: tuple[Rule, ...]) -> tuple[pl.Series, pl.Series, pl.Series, pl.Series]:
    """Positions and the class, id and severity at each, as Series built once per rule list."""
    return (
        pl.Series(range(len(rules)), dtype=pl.Int32),
        pl.Series([r.failure_class for r in rules], dtype=pl.String),
        pl.Series([r.id for r in rules], dtype=pl.String),
        pl.Series([r.severity for r in rules], dtype=pl.String),
    )


def classify(events: pl.LazyFrame | pl.DataFrame, rules: list[Rule]) -> pl.LazyFrame:
    """Set failure_class, rule (and severity overrides) by the first matching rule."""
    if isinstance(events, pl.DataFrame):
        rules = applicable(rules, events)
    lf = events.lazy()
    if not rules:
        return lf.with_columns(pl.lit(None, pl.String).alias("failure_class"), pl.lit(None, pl.String).alias("rule"))
    return labelled(lf.with_columns(first_rule(list(enumerate(rules))).alias("_rule_idx")), rules,
                    pl.col("_rule_idx")).drop("_rule_idx")
