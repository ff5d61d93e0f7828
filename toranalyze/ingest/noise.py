"""Lines that parsers understand but do not record (their ``noise`` patterns): covered lines."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import polars as pl

from toranalyze.ingest.prefilter import candidate_lines, worth


def _alternations(parsers: Sequence[Any]) -> list[str]:
    """One alternation per parser (one alternation of all of them ran slower on small files: the
    regex engine handles a hundred alternatives less well than a few dozen)."""
    per_parser = ["|".join(f"(?:{p})" for p in getattr(parser, "noise", ())) for parser in parsers]
    return [alternation for alternation in per_parser if alternation]


def _noise_tests(parsers: Sequence[Any]) -> list[pl.Expr]:
    return [pl.col("text").str.contains(alternation) for alternation in _alternations(parsers)]


def noise_mask(parsers: Sequence[Any]) -> pl.Expr | None:
    """Whether a line matches a noise pattern of any parser."""
    tests = _noise_tests(parsers)
    return reduce(operator.or_, tests) if tests else None


SAMPLE = 2048  # lines of a file's first block that rank the tests before any block has


@dataclass
class NoiseLines:
    """The lines of a block that match a noise pattern of any parser, found as a cascade: each
    parser's alternation searches only the lines the ones before it did not match, the parser
    that matched most in the previous block first (in a file's first block, the most in its first
    ``SAMPLE`` lines). In a big training log one parser's noise (NCCL INFO chatter) is most of the
    lines; the others then search a small remainder. With the prefilter (``prefilter.enabled``)
    that remainder is first cut to the lines one scan of every test's patterns finds a possible
    match in: the first test took its own lines, so the scan reports few, and on a big remainder
    (``prefilter.worth``) it costs less than a polars search per parser."""

    tests: list[pl.Expr]
    hits: list[int] = field(default_factory=list)
    patterns: list[str] = field(default_factory=list)  # each test's alternation
    ranked: bool = False  # hits hold a block's counts

    @classmethod
    def of(cls, parsers: Sequence[Any]) -> NoiseLines:
        patterns = _alternations(parsers)
        return cls([pl.col("text").str.contains(p) for p in patterns], [0] * len(patterns), patterns)

    def __call__(self, lines: pl.DataFrame) -> pl.Series:
        if not self.ranked and len(self.tests) > 1 and lines.height:
            self.hits = list(lines.head(SAMPLE).select(t.sum().alias(str(i)) for i, t in enumerate(self.tests)).row(0))
        self.ranked = True
        found = []
        for k, i in enumerate(sorted(range(len(self.tests)), key=lambda i: -self.hits[i])):
            if k == 1 and worth(lines.height):
                lines = lines.filter(candidate_lines(lines["text"], tuple(sorted(self.patterns))))
            if lines.height == 0:
                self.hits[i] = 0
                continue
            match = lines.select(self.tests[i]).to_series()
            found.append(lines.filter(match)["line"])
            self.hits[i] = len(found[-1])
            lines = lines.filter(~match)
        return pl.concat(found) if found else pl.Series("line", [], pl.Int64)
