"""Lines that parsers understand but do not record (their ``noise`` patterns): covered lines."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import polars as pl


def _noise_tests(parsers: Sequence[Any]) -> list[pl.Expr]:
    """One alternation per parser (one alternation of all of them ran slower on small files: the
    regex engine handles a hundred alternatives less well than a few dozen)."""
    per_parser = ["|".join(f"(?:{p})" for p in getattr(parser, "noise", ())) for parser in parsers]
    return [pl.col("text").str.contains(alternation) for alternation in per_parser if alternation]


def noise_mask(parsers: Sequence[Any]) -> pl.Expr | None:
    """Whether a line matches a noise pattern of any parser."""
    tests = _noise_tests(parsers)
    return reduce(operator.or_, tests) if tests else None


@dataclass
class NoiseLines:
    """The lines of a block that match a noise pattern of any parser, found as a cascade: each
    parser's alternation searches only the lines the ones before it did not match, the parser
    that matched most in the previous block first. In a big training log one parser's noise (NCCL
    INFO chatter) is most of the lines; the others then search a small remainder."""

    tests: list[pl.Expr]
    hits: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, parsers: Sequence[Any]) -> NoiseLines:
        tests = _noise_tests(parsers)
        return cls(tests, [0] * len(tests))

    def __call__(self, lines: pl.DataFrame) -> pl.Series:
        found = []
        for i in sorted(range(len(self.tests)), key=lambda i: -self.hits[i]):
            if lines.height == 0:
                self.hits[i] = 0
                continue
            match = lines.select(self.tests[i]).to_series()
            found.append(lines.filter(match)["line"])
            self.hits[i] = len(found[-1])
            lines = lines.filter(~match)
        return pl.concat(found) if found else pl.Series("line", [], pl.Int64)
