"""One multi-pattern scan that rules lines out before any regex reads them one by one.

Two steps of a block search many patterns over lines that almost never hold one: the failure
vocabulary (some 60 rules, the loss and size patterns) over every line no parser claimed, and
the noise patterns of all but the busiest parser over the lines left after that parser's
chatter. Hyperscan compiles such a set once per process into one automaton and reads the lines,
joined, in one pass (`candidate_lines`); only the lines it reports go on to the exact polars
tests, so every output is the one those tests alone give.

Three promises make that hold:

* **Loosened patterns.** A pattern is compiled with its zero-width assertions (``^``, ``$``,
  ``\\b``, ``\\B``, ``\\A``, ``\\z``) removed (``loosened``): it then matches wherever the
  original does, and in any text holding such a match, so a scan of a line's text stands for a
  search of the message the vocabulary's framer cuts out of it. A pattern Hyperscan cannot
  compile (or one matching the empty string) is searched with polars instead.
* **Every match end.** Without ``SINGLEMATCH`` Hyperscan reports each offset a match ends at, so
  the lines matches end in are found even where a match across the joining newline is reported
  too (a superset again).
* **ASCII only.** Hyperscan reads bytes: ``.``, ``\\w`` or a negated class do not match a
  multi-byte character as polars' Unicode-aware engine does, so a line holding a non-ASCII
  character is always a candidate.

Hyperscan pays where candidates are rare and the lines many: its Python callback runs once per
match, so a scan whose patterns hit most lines (NCCL INFO chatter against the noise patterns)
costs more than polars' own search, and below ``WORTH`` lines the polars tests alone cost less
than compiling and joining. Without the ``hyperscan`` module, or with ``TORANALYZE_NO_HYPERSCAN``
set, the callers skip the prefilter (``worth``) and run their polars tests on every line, as
before it existed: the same outputs. ``candidate_lines`` called without Hyperscan is one polars
alternation of the loosened patterns.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import polars as pl

hyperscan: Any
try:  # an optional speed-up: every answer has a polars path
    import hyperscan
except ImportError:  # pragma: no cover - the polars path is tested through TORANALYZE_NO_HYPERSCAN
    hyperscan = None

_OFF = "TORANALYZE_NO_HYPERSCAN"  # set (non-empty): the polars paths only (tests compare the two)
_ASSERTIONS = frozenset("bBAzZ")
# Rust-regex flag groups Hyperscan does not know ("-u": ASCII classes, what Hyperscan has anyway)
_FLAGS = (("(?i-u:", "(?i:"), ("(?-u:", "(?:"), ("(?-u)", ""))
# Class set operations of Rust's syntax, which Hyperscan would read as literal characters
_SET_OPERATIONS = ("&&", "--", "~~")


# Fewer lines than this are searched by the polars tests alone: compiling a set of patterns (once
# per process, 0.1-0.2 s) and joining the lines cost more than the tests they would spare.
WORTH = 20_000


def enabled() -> bool:
    """Whether the Hyperscan path is in use."""
    return hyperscan is not None and not os.environ.get(_OFF)


def worth(lines: int) -> bool:
    """Whether ``lines`` lines are prefiltered (``candidate_lines``) before their polars tests."""
    return lines >= WORTH and enabled()


def loosened(pattern: str) -> str:
    """``pattern`` without its zero-width assertions: it matches wherever ``pattern`` does and in
    every text that holds such a match (removing an assertion only widens what matches)."""
    out: list[str] = []
    i, depth = 0, 0  # depth: inside a character class
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            if depth or pattern[i + 1] not in _ASSERTIONS:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if depth:
            if c == "[" and pattern[i + 1 : i + 2] == ":":  # a POSIX class: '[:alpha:]'
                end = pattern.find(":]", i + 2)
                out.append(pattern[i : end + 2])
                i = end + 2
                continue
            depth += c == "["
            depth -= c == "]"
        elif c == "[":
            depth = 1
            out.append(c)
            i += 1
            # a ']' first in the class (after an optional '^') is a literal
            for lead in ("^", "]"):
                if pattern[i : i + 1] == lead:
                    out.append(lead)
                    i += 1
            continue
        elif c in "^$":
            i += 1
            continue
        out.append(c)
        i += 1
    text = "".join(out)
    for rust, plain in _FLAGS:
        text = text.replace(rust, plain)
    return text


class _Database:
    """A compiled Hyperscan database of loosened patterns, and those it could not take (``rest``:
    a construct Hyperscan lacks, or a pattern that matches the empty string, which would report a
    match at every offset); ``candidate_lines`` searches those with polars."""

    def __init__(self, patterns: Sequence[str]):
        self.flags = hyperscan.HS_FLAG_PREFILTER
        self.lock = threading.Lock()  # a database's scratch space serves one scan at a time
        plain = [p for p in patterns if not any(op in p for op in _SET_OPERATIONS)]
        self.rest = [p for p in patterns if p not in plain]
        try:
            self.db = self._compiled(plain) if plain else None
        except hyperscan.error:
            taken = [p for p in plain if self._reads(p)]
            self.rest += [p for p in plain if p not in taken]
            self.db = self._compiled(taken) if taken else None

    def _compiled(self, patterns: Sequence[str]) -> Any:
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(expressions=[p.encode() for p in patterns], ids=list(range(len(patterns))),
                   elements=len(patterns), flags=[self.flags] * len(patterns))
        return db

    def _reads(self, pattern: str) -> bool:
        try:
            self._compiled([pattern])
        except hyperscan.error:
            return False
        return True


@lru_cache(maxsize=32)
def _database(patterns: tuple[str, ...]) -> _Database:
    """Built once per process for each set of patterns (compiling costs far more than a scan)."""
    return _Database([loosened(p) for p in patterns])


def candidate_lines(texts: pl.Series, patterns: tuple[str, ...]) -> pl.Series:
    """Which of ``texts`` may hold a match of one of ``patterns`` in any substring of them (a
    superset, as a boolean Series): one scan of the texts joined by newlines. Lines with non-ASCII
    characters are always candidates (see the module's notes)."""
    if texts.len() == 0 or not patterns:
        return pl.Series(texts.name, [False] * texts.len(), pl.Boolean)
    if not enabled():
        alternation = "|".join(f"(?:{loosened(p)})" for p in patterns)
        return texts.str.contains(alternation).fill_null(False)
    db = _database(patterns)
    if db.db is None:
        out = pl.Series(texts.name, [False] * texts.len())
    else:
        with db.lock:
            out = _scanned(texts, db.db)
    for pattern in db.rest:
        out = out | texts.str.contains(pattern).fill_null(False)
    # a line with a non-ASCII character: more bytes than characters
    return out | (texts.str.len_bytes() != texts.str.len_chars()).fill_null(False)


_PIECE = 32_768  # lines joined per scan: the joined text of a whole block would double its memory


def _scanned(texts: pl.Series, db: Any) -> pl.Series:
    """The lines of ``texts`` some match of ``db`` ends in: a scan of them joined by newlines,
    a piece of ``_PIECE`` lines at a time."""
    hits = np.zeros(texts.len(), dtype=bool)
    for start in range(0, texts.len(), _PIECE):
        piece = texts.slice(start, _PIECE).fill_null("")
        at = _ending_lines(piece, db)
        hits[start + at] = True
    return pl.Series(texts.name, hits)


def _ending_lines(piece: pl.Series, db: Any) -> np.ndarray:
    """The positions in ``piece`` (no nulls) of the lines a match of ``db`` ends in."""
    joined = piece.str.join("\n").cast(pl.Binary).item()
    ends: list[int] = []

    def hit(_i: int, _start: int, end: int, _flags: int, _ctx: Any) -> None:
        ends.append(end)

    db.scan(joined, match_event_handler=hit)
    if not ends:
        return np.zeros(0, dtype=np.int64)
    # line k's separator lies at stops[k]: a match ending at offset e (exclusive) has its last
    # byte in the first line whose separator lies at or after e - 1
    stops = (piece.str.len_bytes().cast(pl.Int64, strict=False) + 1).cum_sum().to_numpy() - 1
    at = np.searchsorted(stops, np.asarray(ends, dtype=np.int64) - 1, side="left")
    return np.minimum(at, piece.len() - 1)
