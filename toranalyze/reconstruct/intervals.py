"""Range look-ups that stay linear in the number of records, for long runs with many incidents.

An equality join on ``job`` followed by a range filter pairs every interruption with every
record (or step row) of its job: a month of two-second steps with a thousand incidents is a
billion rows. The functions here give the same rows without forming those pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import polars as pl


def in_windows(
    windows: pl.DataFrame,
    records: pl.DataFrame,
    key: str = "attempt_idx",
    by: tuple[str, ...] = ("job",),
    on: str = "t",
) -> pl.DataFrame:
    """Each record inside a window ``[_lo, _hi]`` of its group, with that window's columns.

    ``windows``: the ``by`` columns, ``key``, _lo, _hi (integers). ``records``: the ``by``
    columns, ``on``, and anything else (a ``key`` column there is replaced by the window's).
    Returns the pairs ``by == by and _lo <= on <= _hi``, records in their input order: exactly
    what the equality join on ``by`` followed by that filter returns, with ``records``' columns
    after ``windows``'.

    An interruption's window lies between two attempt starts (a slow period between two others
    of its attempt), so a group's windows do not overlap and a record can only be in the last
    window starting at or before it (``join_asof``). A group whose windows overlap all the same
    takes the pairwise join, for that group alone.
    """
    grp = list(by)
    w = windows.filter(pl.col("_lo") <= pl.col("_hi")).sort(*grp, "_lo")
    clash = w.filter(pl.col("_lo") <= pl.col("_hi").shift(1).over(grp)).select(grp).unique()
    recs = records.drop(key, strict=False).with_row_index("_i")
    recs = recs.filter(pl.all_horizontal(pl.col(c).is_not_null() for c in [*grp, on]))
    solo_w = w.join(clash, on=grp, how="anti")
    solo_r = recs.join(clash, on=grp, how="anti") if clash.height else recs
    # (records already in (by, on) order, as step rows are kept, need no sort: the join needs
    # that order within each group only, and they stay in input order)
    in_order = in_key_order(solo_r, *grp, on)
    solo_r = solo_r if in_order else solo_r.sort(on, maintain_order=True)
    hit = solo_r.join_asof(
        solo_w.sort("_lo"), left_on=on, right_on="_lo", by=grp, strategy="backward", check_sortedness=False
    ).filter(pl.col("_hi").is_not_null() & (pl.col(on) <= pl.col("_hi")))
    out = [hit]
    if clash.height:
        many = w.join(clash, on=grp, how="semi").join(recs.join(clash, on=grp, how="semi"), on=grp)
        out.append(many.filter((pl.col(on) >= pl.col("_lo")) & (pl.col(on) <= pl.col("_hi"))))
    cols = [*windows.columns, *(c for c in recs.columns if c not in windows.columns)]
    if in_order and len(out) == 1:
        return hit.select(cols).drop("_i")
    return pl.concat([f.select(cols) for f in out]).sort("_i", key, maintain_order=True).drop("_i")


def min_after(queries: pl.DataFrame, rows: pl.DataFrame, value: str) -> pl.DataFrame:
    """For each query (job, attempt, step) the smallest ``value`` of a row of the same job with
    ``attempt_idx > attempt`` and ``step >= step`` (null when none): job, attempt, ``value``.

    Per attempt, the rows become a running minimum of ``value`` from the highest step down, so
    one as-of look-up at the query's step answers for that attempt; each query looks up every
    later attempt of its job: O(rows + queries · attempts) rows, one pass over the rows.
    """
    out_schema = pl.Schema({"job": queries.schema["job"], "attempt": queries.schema["attempt"],
                            value: rows.schema[value]})
    grp = ["job", "attempt_idx"]
    r = rows.select(*grp, "step", value)
    if r["step"].null_count() or r[value].null_count():  # (no copy of the rows when none is null)
        r = r.filter(pl.col("step").is_not_null() & pl.col(value).is_not_null())
    q = queries.select("job", "attempt", "step")
    if r.height == 0 or q.height == 0:
        return pl.DataFrame(schema=out_schema)
    # Step rows come in (job, attempt, step) order with distinct steps: each attempt a run of rows
    # (windows take it as a slice) and the as-of look-up a binary search of the packed keys.
    if in_key_order(r, *grp, "step"):
        run = run_id(*grp)
        r = r.with_columns(pl.col(value).reverse().cum_min().reverse().over(run))
        atts = r.filter(run.is_first_distinct()).select(grp)  # (the first row of each run)
        later = q.join(atts, on="job").filter(pl.col("attempt_idx") > pl.col("attempt"))
        keys = OrderedKeys(r, grp, "step", checked=True)
        if keys.ok:
            pos = keys.lookup(later.select(*grp, "step"), "step", strategy="forward")
            later = later.with_columns(r[value].gather(pos))
        else:
            later = later.sort("step").join_asof(r.rename({"step": "_s"}), left_on="step", right_on="_s", by=grp,
                                                 strategy="forward", check_sortedness=False)
    else:
        # Otherwise the smallest value first among equal steps, and the first of them kept (its
        # running minimum covers them).
        r = r.sort(*grp, "step", value)
        first = pl.any_horizontal((pl.col(c) != pl.col(c).shift(1)).fill_null(True) for c in [*grp, "step"])
        r = r.with_columns(pl.col(value).reverse().cum_min().reverse().over(grp)).filter(first)
        later = (
            q.join(r.select(grp).unique(), on="job")
            .filter(pl.col("attempt_idx") > pl.col("attempt"))
            .sort("step")
            .join_asof(r.rename({"step": "_s"}), left_on="step", right_on="_s", by=grp, strategy="forward",
                       check_sortedness=False)
        )
    return (
        later.group_by("job", "attempt")
        .agg(pl.col(value).min())
        .filter(pl.col(value).is_not_null())
        .cast(out_schema)
    )


def in_key_order(df: pl.DataFrame, *keys: str, strict: bool = True) -> bool:
    """Are the rows in ``keys`` order, strictly (no equal keys) unless ``strict=False``, with no
    null key? (A linear check.)"""
    cols = list(keys)
    if df.height <= 1:
        return True
    if df.select(pl.any_horizontal(pl.col(cols).is_null().any())).item():
        return False
    last = pl.col(cols[-1])
    later = last > last.shift(1) if strict else last >= last.shift(1)
    for k in reversed(cols[:-1]):
        later = (pl.col(k) > pl.col(k).shift(1)) | ((pl.col(k) == pl.col(k).shift(1)) & later)
    return bool(df.select(later.slice(1).all()).item())


def flag_sorted(df: pl.DataFrame, col: str = "job") -> pl.DataFrame:
    """``df`` with ``col`` flagged sorted, for rows known to be in its order (no null): windows
    and group-bys over it then take slices. A filter keeps the flag; a gather or join drops it."""
    return df.with_columns(pl.col(col).set_sorted()) if df[col].null_count() == 0 else df


def run_id(*keys: str) -> pl.Expr:
    """Runs of equal ``keys`` numbered 0, 1, ... and flagged sorted, so that ``.over`` on it takes
    each group as a slice instead of hashing the keys (several times faster on millions of rows).
    The runs are the keys' groups only when the rows are in key order."""
    return (pl.col(keys[0]) if len(keys) == 1 else pl.struct(keys)).rle_id().set_sorted()



def group_keys(df: pl.DataFrame, *keys: str) -> tuple[list[str | pl.Expr], list[pl.Expr]]:
    """(the ``group_by`` keys, the key columns to aggregate with them) for ``df``: the runs of equal
    keys (``_g``, taken as slices; the caller drops it) when the rows are in key order, as step
    rows are kept, else the keys themselves (hashed). The groups come in either order."""
    if in_key_order(df, *keys, strict=False):
        return [run_id(*keys).alias("_g")], [pl.col(k).first() for k in keys]
    return list(keys), []


def agg_by(df: pl.DataFrame, keys: str | list[str], *aggs: pl.Expr) -> pl.DataFrame:
    """``df.group_by(keys).agg(*aggs)`` (the keys first, then the aggregations), the groups taken
    as slices when the rows are in key order (records and step rows mostly are) instead of hashed."""
    cols = [keys] if isinstance(keys, str) else list(keys)
    if in_key_order(df, *cols, strict=False):
        return df.group_by(run_id(*cols).alias("__run")).agg(*[pl.col(k).first() for k in cols], *aggs).drop("__run")
    return df.group_by(*cols).agg(*aggs)


def packed_key(df: pl.DataFrame, cols: list[str]) -> pl.Expr | None:
    """Integer columns packed into one Int64 that sorts as they do together (one numeric column
    to sort or compare instead of several), or None when they hold nulls or their ranges need
    more than 62 bits."""
    if df.height == 0 or not all(df.schema[c].is_integer() for c in cols):
        return None
    if df.select(pl.any_horizontal(pl.col(cols).is_null().any())).item():
        return None
    lo_hi = df.select(*[pl.col(c).min().alias(f"lo{i}") for i, c in enumerate(cols)],
                      *[pl.col(c).max().alias(f"hi{i}") for i, c in enumerate(cols)]).row(0)
    lo, hi = lo_hi[: len(cols)], lo_hi[len(cols):]
    bits = [int(h - low).bit_length() for low, h in zip(lo, hi, strict=True)]
    if sum(bits) > 62:
        return None
    expr, shift = pl.lit(0, pl.Int64), 0
    for c, low, b in reversed(list(zip(cols, lo, bits, strict=True))):
        expr = expr + (pl.col(c).cast(pl.Int64) - low) * (1 << shift)
        shift += b
    return expr



def attach(df: pl.DataFrame, table: pl.DataFrame, on: str | list[str], how: str = "left") -> pl.DataFrame:
    """``df.join(table, on=on, how=how)`` (left or inner) for a ``table`` with one row per key,
    as a look-up: keys of small non-negative integers (job codes, attempt indices, row ids)
    address a slot array, so millions of rows gather their values instead of being hashed. Other
    keys take the join. The fast path keeps ``df``'s row order."""
    keys = [on] if isinstance(on, str) else list(on)
    extra = [c for c in table.columns if c not in keys]
    slots = None if set(extra) & set(df.columns) else _slots(df, table, keys)
    if slots is None:
        return df.join(table, on=keys, how="inner" if how == "inner" else "left")
    size, index = slots
    slot = pl.repeat(None, size, dtype=pl.Int64, eager=True).scatter(
        table.select(index)[:, 0], pl.int_range(table.height, dtype=pl.Int64, eager=True)
    )
    if size - slot.null_count() < table.height:  # a key repeated: the join's rows, not a look-up
        return df.join(table, on=keys, how="inner" if how == "inner" else "left")
    pos = slot.gather(df.select(index)[:, 0])
    out = df.with_columns(table[c].gather(pos) for c in extra)
    return out.filter(pos.is_not_null()) if how == "inner" else out


_INDEX_TYPES = (pl.UInt8, pl.UInt16, pl.UInt32)


def _slots(df: pl.DataFrame, table: pl.DataFrame, keys: list[str]) -> tuple[int, pl.Expr] | None:
    """(slot count, slot of a row) when ``keys`` can address a slot array: integers, none negative,
    no null in ``table``, and not many more slots than table rows or rows looked up."""
    if table.height == 0 or df.height == 0:
        return None
    if not all(df.schema[k].is_integer() and table.schema[k].is_integer() for k in keys):
        return None
    if table.select(pl.any_horizontal(pl.col(keys).is_null().any())).item():
        return None
    # The keys' range over both frames, each reduced on its own (no copy of millions of keys);
    # ``table``'s have no null.
    def ranges(f: pl.DataFrame) -> tuple[int | None, ...]:
        return f.select(*[pl.col(k).min().alias(f"lo_{k}") for k in keys],
                        *[pl.col(k).max().alias(f"hi_{k}") for k in keys]).row(0)

    own, other = ranges(table), ranges(df)
    lo = [min(x for x in (a, b) if x is not None) for a, b in zip(own[: len(keys)], other[: len(keys)], strict=True)]
    hi = [max(x for x in (a, b) if x is not None) for a, b in zip(own[len(keys):], other[len(keys):], strict=True)]
    if min(lo) < 0:
        return None
    sizes = [int(h) + 1 for h in hi]
    size = 1
    for n in sizes:
        size *= n
    # (a slot array no longer than the rows looked up, or twice the table: its cost stays linear)
    if size > max(1 << 16, 2 * table.height, df.height):
        return None
    if len(keys) == 1 and df.schema[keys[0]] in _INDEX_TYPES and table.schema[keys[0]] in _INDEX_TYPES:
        return size, pl.col(keys[0])  # (gathers take these as they are; other types are converted first)
    terms, stride = [], 1
    for k, n in reversed(list(zip(keys, sizes, strict=True))):
        terms.append(pl.col(k).cast(pl.Int64) * stride if stride > 1 else pl.col(k).cast(pl.Int64))
        stride *= n
    return size, terms[0] if len(terms) == 1 else pl.sum_horizontal(terms, ignore_nulls=False)



def _shifted(v: pl.Expr, bits: int) -> pl.Expr:
    return v * (1 << bits) if bits else v


class OrderedKeys:
    """The keys of rows strictly in (by, on) order (step rows as the stages keep them), packed
    into one integer for as-of look-ups by binary search: an as-of join by groups hashes every
    right row into its group, millions of step rows for a few hundred saves. ``ok`` is False
    when the keys are not integers, hold a null, need more than 62 bits, or are not in that
    order (``checked``: the caller knows they are); the caller then takes the join."""

    def __init__(self, rows: pl.DataFrame, by: list[str], on: str, checked: bool = False) -> None:
        self.cols, self.height = [*by, on], rows.height
        self.ok = rows.height > 0 and all(rows.schema[c].is_integer() for c in self.cols)
        self.ok = self.ok and (checked or in_key_order(rows, *self.cols))
        if not self.ok:
            return
        lo_hi = rows.select(*[pl.col(c).min().alias(f"lo{i}") for i, c in enumerate(self.cols)],
                            *[pl.col(c).max().alias(f"hi{i}") for i, c in enumerate(self.cols)]).row(0)
        n = len(self.cols)
        # ``on`` one below and one above its range: a left value beyond it looks up as those do.
        self.lo = [int(x) for x in lo_hi[: n - 1]] + [int(lo_hi[n - 1]) - 1]
        self.hi = [int(x) for x in lo_hi[n: 2 * n - 1]] + [int(lo_hi[-1]) + 1]
        self.bits = [(h - low).bit_length() for low, h in zip(self.lo, self.hi, strict=True)]
        self.ok = sum(self.bits) <= 62
        if self.ok:
            self.group, self.key = self._packed(rows, self.cols, inside=True)

    def _packed(self, df: pl.DataFrame, cols: list[str], inside: bool = False) -> tuple[pl.Series, pl.Series]:
        """(group part, whole key) of ``df``'s ``cols``: null when a group column is null or out
        of range (no row of that group), ``on`` clipped to one beyond the range (``inside``: the
        values are the rows' own, in range)."""
        terms, shift = [], 0
        for c, low, high, b in reversed(list(zip(cols[:-1], self.lo[:-1], self.hi[:-1], self.bits[:-1], strict=True))):
            v = pl.col(c).cast(pl.Int64)
            v = v if inside else pl.when(v.is_between(low, high)).then(v)
            terms.append(_shifted(v - low if low else v, shift))
            shift += b
        on = pl.col(cols[-1]).cast(pl.Int64)
        on = (on if inside else on.clip(self.lo[-1], self.hi[-1])) - self.lo[-1]
        grp = pl.sum_horizontal(terms, ignore_nulls=False) if terms else pl.lit(0, pl.Int64)
        out = df.select(grp.alias("g"), on.alias("_on"))
        out = out.select("g", (_shifted(pl.col("g"), self.bits[-1]) + pl.col("_on")).alias("k"))
        return out["g"], out["k"]

    def lookup(self, left: pl.DataFrame, left_on: str, strategy: str = "backward",
               allow_exact_matches: bool = True) -> pl.Series:
        """Per left row (its ``by`` columns and ``left_on``), the position of the row an as-of
        join would pair it with (null: none)."""
        group, key = self._packed(left, [*self.cols[:-1], left_on])
        side: Literal["left", "right"] = "right" if (strategy == "backward") == allow_exact_matches else "left"
        pos = self.key.search_sorted(key.fill_null(0), side=side).cast(pl.Int64)
        pos = pos - 1 if strategy == "backward" else pos
        pos = pl.select(pl.when(key.is_not_null() & pos.is_between(0, self.height - 1)).then(pos))[:, 0]
        return pl.select(pl.when(self.group.gather(pos.fill_null(0)) == group).then(pos))[:, 0]


@dataclass(frozen=True)
class AsofOn:
    """The columns and the direction of an as-of join (``join_asof``'s arguments of those names)."""

    left_on: str
    right_on: str
    strategy: str = "backward"
    allow_exact_matches: bool = True


def asof_in_order(left: pl.DataFrame, right: pl.DataFrame, on: AsofOn, by: list[str],
                  keys: OrderedKeys) -> pl.DataFrame:
    """``left.join_asof(right, left_on=..., right_on=..., by=by, ...)`` (as ``on`` says) for a
    ``right`` whose keys are ``keys`` (``ok``; built on its ``by`` and ``on.right_on`` columns):
    the same rows and columns (a right column whose name the left has takes the suffix
    ``_right``), in left's order."""
    left_on, right_on = on.left_on, on.right_on
    pos = keys.lookup(left, left_on, on.strategy, on.allow_exact_matches)
    skip = set(by) | ({left_on} if right_on == left_on else set())
    return left.with_columns(
        right[c].gather(pos).alias(f"{c}_right" if c in left.columns else c) for c in right.columns if c not in skip
    )
