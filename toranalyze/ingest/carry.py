"""State carried across a file's block boundaries: lines read again and rows settled later."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from toranalyze.ingest.line_context import with_prefix_context
from toranalyze.ingest.parser_rows import run_parser

EAGER_CARRY_BYTES = 4 * 1024 * 1024  # a block this big has its carry worked out at once (CarriedLines)


TAIL_LINES = 256  # the longest record cut by a block boundary that the next block reads again
TAIL_GAP = 2  # lines after a block's last record that may still be part of it (open_tail)


@dataclass
class CarriedLines:
    """The lines of a file's earlier blocks that parsers declaring ``carry`` see again.

    A parser reads one block at a time, so state a block's rules take from lines far above (the
    clock and start of a progress bar that began blocks ago) would be lost at each block's start.
    ``parser.carry(lines, rows)`` (the lines it read and its rows of them) names the few of those
    lines the next block needs; they are put ahead of the next block's lines (in line order) and
    the parser's rows on them are dropped, being the earlier block's. The carried frame may hold
    columns the prepared lines do not (hints: state that no line states, such as a running count);
    they are kept, null on the block's own lines, so a parser finds them only on carried lines and
    only in a file's later blocks. The carry of a block is only worked out once a next block comes,
    so a file of one block pays nothing for it.

    A row on a carried line that now has a time is kept in ``revisions``: a rule may time a record
    by lines below it (a start-up banner takes the next clock), and when those lines lie in the
    next block the earlier block could give it none (``TextEvents`` then revises that row).

    A parser declaring no ``carry`` is given its last record again when that record reaches the
    end of a block (``open_tail``): a traceback or an error table cut by the boundary goes on in
    the next block. Its row on the carried lines, when it now reaches into the next block's lines,
    is kept in ``extended`` (``TextEvents`` then puts it in place of the earlier block's row).
    """

    # parser -> the lines it last read and its rows of them (its carry is worked out from both),
    # or, after a big block, the carry itself (holding a big block until the next one comes would
    # cost its memory, a small block's carry would be worked out for nothing in a one-block file)
    seen: dict[str, tuple[pl.DataFrame, pl.DataFrame | None] | pl.DataFrame] = field(default_factory=dict)
    revisions: list[pl.DataFrame] = field(default_factory=list)  # this block's timed rows on carried lines
    ahead: list[pl.Series] = field(default_factory=list)  # the lines carried into this block by ``carry``
    extended: list[pl.DataFrame] = field(default_factory=list)  # records going on in this block

    def run(self, parser: Any, prepared: pl.DataFrame) -> pl.DataFrame | None:
        """The parser's rows of ``prepared``, read after the lines carried from earlier blocks."""
        lines = self._ahead(parser, prepared)
        df = run_parser(parser, lines)
        self._keep(parser, lines, df)
        if df is None or lines is prepared:
            return df
        first = prepared["line"][0]
        own = pl.col("line") >= first
        if hasattr(parser, "carry"):
            timed = df.filter(~own & pl.col("ts").is_not_null())
            if timed.height:
                self.revisions.append(timed.select("line", "kind", "parser", *_REVISED))
        else:
            going_on = df.filter(~own & (pl.coalesce("line_end", "line") >= first))
            if going_on.height:
                self.extended.append(with_prefix_context(going_on, lines))
        return df.filter(own)

    def take(self) -> tuple[pl.DataFrame | None, list[pl.DataFrame], pl.Series]:
        """What was gathered since the last call: the revisions (None: none), the extended records
        and the lines carried."""
        revised = None
        if self.revisions:
            revised = pl.concat(self.revisions).unique(["line", "kind", "parser"], keep="last", maintain_order=True)
        ahead = pl.concat(self.ahead) if self.ahead else pl.Series("line", [], pl.Int64)
        extended = self.extended
        self.revisions, self.ahead, self.extended = [], [], []
        return revised, extended, ahead

    def goes_on(self, parser: Any) -> bool:
        """Whether a parser without a ``carry`` of its own has a record going on from the block
        before (its open tail): it then reads this block even where its gates do not hold (the
        end of torchrun's error table names nothing they look for)."""
        if hasattr(parser, "carry"):
            return False
        before = self.seen.get(parser.name)
        if before is None:
            return False
        if not isinstance(before, pl.DataFrame):
            before = self.seen[parser.name] = open_tail(*before)
        return before.height > 0

    def skip(self, parser: Any, prepared: pl.DataFrame) -> None:
        """A block the parser's gates rule out: what it carries may still lie in it (a clock)."""
        self._keep(parser, self._ahead(parser, prepared), None)

    def _keep(self, parser: Any, lines: pl.DataFrame, rows: pl.DataFrame | None) -> None:
        big = lines.estimated_size() > EAGER_CARRY_BYTES
        self.seen[parser.name] = _carry_of(parser)(lines, rows) if big else (lines, rows)

    def _ahead(self, parser: Any, prepared: pl.DataFrame) -> pl.DataFrame:
        before = self.seen.pop(parser.name, None)
        if before is None or not prepared.height:
            return prepared
        ahead = before if isinstance(before, pl.DataFrame) else _carry_of(parser)(*before)
        if not ahead.height:
            return prepared
        if hasattr(parser, "carry"):  # only its rows are revised (a tail is replaced at once)
            self.ahead.append(ahead["line"])
        # A carried piece of the line this block goes on with counts as the line before it: the
        # parser's rows on it are the earlier block's.
        first = prepared["line"][0]
        ahead = ahead.with_columns(pl.min_horizontal("line", first - 1))
        return pl.concat([ahead, prepared], how="diagonal")


def _carry_of(parser: Any) -> Any:
    return parser.carry if hasattr(parser, "carry") else open_tail


def open_tail(lines: pl.DataFrame, rows: pl.DataFrame | None) -> pl.DataFrame:
    """The lines of the last record of ``rows`` when it reaches the end of ``lines`` (a block, with
    the lines carried into it), within TAIL_GAP lines and no longer than TAIL_LINES: the next block
    may go on with it. None otherwise."""
    if rows is None or rows.height == 0 or lines.height == 0:
        return lines.clear()
    last = lines["line"][-1]
    end = pl.coalesce("line_end", "line")
    reach = rows.select(end.max()).item()
    start = rows.filter(end == reach).select(pl.col("line").min()).item()
    if reach < last - TAIL_GAP or last - start >= TAIL_LINES:
        return lines.clear()
    return lines.filter(pl.col("line") >= start)


def extend_records(events: pl.DataFrame, extended: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``events`` (a block's) with each row that ``extended`` (rows of the same line and parser read
    again with the next block) reaches further than put in its place, keeping the earlier row's
    value where the new one has none; and the rows that took a place. The kind may change (the
    exception line that names an error's kind may lie below the boundary); when the parser has
    several rows on the line, the kinds must match."""
    key = ["line", "parser"]
    end = pl.coalesce("line_end", "line")
    indexed = events.with_row_index("_r")
    ext = extended.unique([*key, "kind"], keep="last", maintain_order=True).with_row_index("_e")
    pairs = (
        indexed.select("_r", *key, "kind", end.alias("_end"))
        .join(ext.select("_e", *key, pl.col("kind").alias("_new_kind"), end.alias("_new_end")), on=key)
        .filter((pl.col("kind") == pl.col("_new_kind")) | (pl.len().over(key) == 1))
        .filter(pl.col("_new_end") > pl.col("_end"))
        .unique("_r", keep="first", maintain_order=True)
        .unique("_e", keep="first", maintain_order=True)
        .select("_r", "_e")
    )
    if pairs.height == 0:
        return events, extended.clear()
    new = ext.join(pairs, on="_e").select("_r", *events.columns)
    pair = new.join(indexed, on="_r", suffix="_old")
    merged = pair.select("_r", *(pl.coalesce(c, f"{c}_old").alias(c) for c in events.columns))
    out = pl.concat([indexed.join(pairs, on="_r", how="anti"), merged]).sort("_r").drop("_r")
    return out, merged.drop("_r")


_REVISED = ("ts", "ts_offset_s", "ts_year_known", "ts_inferred")  # what a later block may settle


def revise_times(events: pl.DataFrame, revisions: pl.DataFrame) -> pl.DataFrame:
    """``events`` whose rows without a time take the one ``revisions`` gives the same line, kind and
    parser (rows that have one keep it: only a time the earlier block could not give is filled)."""
    return _fill_times(events, revisions, ["line", "kind", "parser"])


def revise_line_times(times: pl.DataFrame, revisions: pl.DataFrame) -> pl.DataFrame:
    """``revise_times`` for a frame of time columns only (``line`` and ``_REVISED``, in row order):
    its rows without a time take the one a revision gives their line."""
    by_line = revisions.filter(pl.col("ts").is_not_null()).unique("line", keep="first", maintain_order=True)
    return _fill_times(times, by_line, ["line"])


def _fill_times(frame: pl.DataFrame, revisions: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """``frame`` (row order kept) whose rows without a time take their ``key``'s revision's."""
    joined = frame.join(
        revisions.select(*key, *(pl.col(c).alias(f"_rev_{c}") for c in _REVISED)),
        on=key,
        how="left",
        maintain_order="left",
    )
    take = pl.col("ts").is_null() & pl.col("_rev_ts").is_not_null()
    return joined.with_columns(
        pl.when(take).then(pl.col(f"_rev_{c}")).otherwise(pl.col(c)).alias(c) for c in _REVISED
    ).select(frame.columns)
