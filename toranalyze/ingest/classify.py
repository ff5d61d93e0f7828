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

Every condition given must hold; a rule needs at least one of match/code/state.
The first matching rule wins. Rows no rule matches keep failure_class null.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import polars as pl

from toranalyze.errors import RulesError
from toranalyze.schema import SEVERITIES
from toranalyze.taxonomy import TAXONOMY

_KEYS = {"id", "class", "source", "kind", "code", "state", "match", "severity", "note"}


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


def parse_rules(text: str, origin: str) -> list[Rule]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"not valid TOML: {exc}", path=origin, hint="fix the syntax; see docs/rules.md") from exc
    out: list[Rule] = []
    for i, item in enumerate(doc.get("rule", []), 1):
        where = f"{origin} (rule #{i})"
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
            try:
                re.compile(match)
            except re.error as exc:
                raise RulesError(f"rule {rid!r}: bad regex: {exc}", path=where) from exc
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
        )
        if not (rule.match or rule.code or rule.state):
            raise RulesError(f"rule {rid!r} needs at least one of match, code, state", path=where)
        out.append(rule)
    return out


def builtin_rules() -> list[Rule]:
    rules: list[Rule] = []
    folder = resources.files("toranalyze") / "rules"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            rules.extend(parse_rules(entry.read_text(encoding="utf-8"), f"builtin:{entry.name}"))
    return rules


def load_rules(user_files: list[str] | tuple[str, ...] = ()) -> list[Rule]:
    """User rules first (they win), then the built-ins. Ids must be unique."""
    rules: list[Rule] = []
    for f in user_files:
        try:
            text = Path(f).read_text(encoding="utf-8")
        except OSError as exc:
            raise RulesError(f"cannot read rules file: {exc}", path=f) from exc
        rules.extend(parse_rules(text, f))
    rules.extend(builtin_rules())
    seen: dict[str, str] = {}
    for r in rules:
        if r.id in seen:
            raise RulesError(f"rule id {r.id!r} is defined twice ({seen[r.id]} and {r.origin})", path=r.origin)
        seen[r.id] = r.origin
    return rules


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
