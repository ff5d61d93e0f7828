"""``kubectl get events`` / ``kubectl events`` tables, as line rules.

Rows are recognised on their own (no header needed), because ``-w`` output and
concatenated captures repeat or lose the header, and a file is read in blocks.
Variants:

* current: ``[NAMESPACE] LAST SEEN TYPE REASON OBJECT MESSAGE``, OBJECT as
  ``pod/name`` (``kubectl events`` prints ``Pod/name`` and may print the age as
  ``6s (x5 over 3m1s)``);
* ``-o wide``: ``... OBJECT SUBOBJECT SOURCE MESSAGE FIRST SEEN COUNT NAME``;
* kubectl <= 1.13: ``LAST SEEN FIRST SEEN COUNT NAME KIND SUBOBJECT TYPE REASON
  SOURCE MESSAGE`` with sources like ``{kubelet host}`` or ``kubelet, host``.

Ages are relative to the capture, so ts stays null unless the parser is given
an anchor (see ``events_to_raw``).
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.kubernetes.common import AGE, INTERVAL, conform_ev

_TYPE = r"(?P<type>Normal|Warning)"
_SUB = r"(?:(?P<sub>[\w.]*\{[^}]*\}|spec\.\S+)\s+)?"
_WIDE = (
    rf"^(?:(?P<ns>[a-z0-9][\w.-]*)\s+)?(?P<age>{AGE})\s+{_TYPE}\s+(?P<reason>[A-Za-z][\w.-]*)\s+"
    rf"(?P<obj>[A-Za-z][\w.-]*/\S+)\s+{_SUB}(?:(?P<src>[\w.-]+(?:, [\w.-]+)?)\s{{3,}})?"
    rf"(?P<msg>.*?)\s{{3,}}(?P<first>{AGE})\s+(?P<count>[0-9]+)\s+(?P<name>\S+\.[0-9a-f]{{8,}})\s*$"
)
_NARROW = (
    rf"^(?:(?P<ns>[a-z0-9][\w.-]*)\s+)?(?P<age>{INTERVAL})\s+{_TYPE}\s+(?P<reason>[A-Za-z][\w.-]*)\s+"
    r"(?P<obj>[A-Za-z][\w.-]*/\S+)\s+(?P<msg>.*?)\s*$"
)
_OLD = (
    rf"^(?:(?P<ns>[a-z0-9][\w.-]*)\s+)?(?P<age>{AGE})\s+(?P<first>{AGE})\s+(?P<count>[0-9]+)\s+(?P<name>\S+)\s+"
    rf"(?P<kind>[A-Z]\w*)\s+{_SUB}{_TYPE}\s+(?P<reason>[A-Za-z][\w.-]*)\s+"
    r"(?P<src>\{[^}]*\}|[\w.-]+(?:, [\w.-]+)?)\s+(?P<msg>.*?)\s*$"
)

HEADER = r"^\s*(?:NAMESPACE\s+)?(?:LAST SEEN|LASTSEEN)\s+(?:TYPE\s+REASON\s+OBJECT|FIRST ?SEEN\s+COUNT)"


def _host(src: pl.Expr) -> pl.Expr:
    """'kubelet, node-7' or '{kubelet node-7}' -> 'node-7'."""
    return pl.coalesce(src.str.extract(r"^\{\S+ (\S+)\}$", 1), src.str.extract(r"^[\w.-]+, (\S+)$", 1))


def _rows(lines: pl.LazyFrame, pattern: str, fields: dict[str, pl.Expr]) -> pl.LazyFrame:
    g = pl.col("_g")
    return (
        lines.with_columns(pl.col("text").str.extract_groups(pattern).alias("_g"))
        .filter(g.struct.field("reason").is_not_null())
        .select(
            pl.col("line"),
            g.struct.field("type").alias("ev_type"),
            g.struct.field("reason").alias("reason"),
            g.struct.field("msg").alias("note"),
            g.struct.field("age").alias("age"),
            *[e.alias(k) for k, e in fields.items()],
        )
    )


def extract_event_tables(lines: pl.LazyFrame) -> pl.LazyFrame:
    """EV_SCHEMA rows for every events-table row in the lines."""
    cand = lines.filter(
        pl.col("text").str.contains("Normal", literal=True) | pl.col("text").str.contains("Warning", literal=True)
    )
    g = pl.col("_g")
    obj = g.struct.field("obj")
    wide = _rows(
        cand,
        _WIDE,
        {
            "obj_kind": obj.str.extract(r"^([^/]+)/", 1),
            "obj_name": obj.str.extract(r"/(.+)$", 1),
            "src_host": _host(g.struct.field("src")),
            "count": g.struct.field("count").cast(pl.Int64, strict=False),
        },
    )
    narrow = _rows(
        cand,
        _NARROW,
        {
            "obj_kind": obj.str.extract(r"^([^/]+)/", 1),
            "obj_name": obj.str.extract(r"/(.+)$", 1),
            "count": g.struct.field("age").str.extract(r"\(x([0-9]+) over", 1).cast(pl.Int64, strict=False),
        },
    )
    old = _rows(
        cand,
        _OLD,
        {
            "obj_kind": g.struct.field("kind"),
            "obj_name": g.struct.field("name"),
            "src_host": _host(g.struct.field("src")),
            "count": g.struct.field("count").cast(pl.Int64, strict=False),
        },
    )
    # One row per line: the most specific layout that matched wins.
    parts = [conform_ev(f).with_columns(pl.lit(i).alias("_p")) for i, f in enumerate([wide, old, narrow])]
    merged = pl.concat(parts, how="vertical").sort("line", "_p")
    return merged.unique("line", keep="first", maintain_order=True).drop("_p")
