"""Mutations of real log excerpts: what a hostile or broken collector can hand the parsers.

Every mutation takes the input bytes and a ``random.Random`` and returns new bytes; ``mutated``
applies a few of them in a row. The seeds are the real excerpts the golden tests hold.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
SEED_BYTES = 64 * 1024  # a seed's head: enough lines for any record the parsers join

# Digits of other scripts: str.isdigit() is true for them, so a careless `\d` or int() takes them.
UNICODE_DIGITS = ("\u0660", "\u06f0", "\u0966", "\uff10", "\U0001d7ce")  # Arabic-Indic, Persian, Devanagari, fullwidth, math
HUGE = (b"4294967296", b"18446744073709551616", b"9" * 40, b"1e999", b"-1e308", b"nan", b"inf", b"-0",
        b"99999999999999999999.5", b"0x7fffffff", b"1" * 401)
STAMPS = (b"0000-01-01T00:00:00", b"9999-12-31T23:59:59.999999Z", b"1969-12-31 23:59:59", b"2038-01-19T03:14:08",
          b"0001-01-01 00:00:00", b"2024-02-30T25:61:61", b"+275760-09-13T00:00:00Z")
NUMBER = re.compile(rb"\d+(?:\.\d+)?")
STAMP = re.compile(rb"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?")


@cache
def seeds() -> tuple[bytes, ...]:
    """The heads of the real excerpts and golden inputs under tests/data (plain text only)."""
    out = []
    for path in sorted(DATA.rglob("*")):
        if not path.is_file() or path.suffix in {".json", ".toml", ".py", ".md", ".gz", ".zst", ".bz2", ".pt"}:
            continue
        if "golden" in path.parts:
            continue
        head = path.read_bytes()[:SEED_BYTES]
        if head and b"\0" not in head:
            out.append(head)
    return tuple(out)


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def window(data: bytes, rng: random.Random, most: int = 40) -> bytes:
    """A run of up to ``most`` consecutive lines of ``data`` (small inputs: many per parse call)."""
    lines = _lines(data)
    start = rng.randrange(len(lines))
    return b"\n".join(lines[start : start + rng.randint(1, most)]) + b"\n"


def flip_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if b:
            b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


def splice(data: bytes, rng: random.Random) -> bytes:
    """Lines of another seed put in the middle of this one."""
    other = window(rng.choice(seeds()), rng, 10)
    lines = _lines(data)
    at = rng.randrange(len(lines) + 1)
    return b"\n".join(lines[:at]) + b"\n" + other + b"\n".join(lines[at:])


def _sub_one(pattern: re.Pattern[bytes], data: bytes, rng: random.Random, repl: Callable[[bytes], bytes]) -> bytes:
    found = list(pattern.finditer(data))
    if not found:
        return data
    m = rng.choice(found)
    return data[: m.start()] + repl(m.group()) + data[m.end() :]


def huge_number(data: bytes, rng: random.Random) -> bytes:
    return _sub_one(NUMBER, data, rng, lambda _: rng.choice(HUGE))


def unicode_digits(data: bytes, rng: random.Random) -> bytes:
    zero = ord(rng.choice(UNICODE_DIGITS))

    def other(digits: bytes) -> bytes:
        return "".join(chr(zero + int(c)) if c.isdigit() else c for c in digits.decode()).encode()

    return _sub_one(NUMBER, data, rng, other)


def extreme_stamp(data: bytes, rng: random.Random) -> bytes:
    return _sub_one(STAMP, data, rng, lambda _: rng.choice(STAMPS))


def line_ends(data: bytes, rng: random.Random) -> bytes:
    """Line breaks as CR only, CRLF, or a mix, and stray CRs."""
    how = rng.randrange(4)
    if how == 0:
        return data.replace(b"\n", b"\r")
    if how == 1:
        return data.replace(b"\n", b"\r\n")
    lines = _lines(data)
    return b"".join(ln + rng.choice((b"\n", b"\r", b"\r\n", b"\n\r", b"\r\r\n")) for ln in lines)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def long_line(data: bytes, rng: random.Random) -> bytes:
    """A line repeated into one very long line, or a very long token."""
    lines = _lines(data)
    at = rng.randrange(len(lines))
    if rng.random() < 0.5:
        lines[at] = lines[at] * rng.randint(100, 3000)
    else:
        lines[at] += rng.choice((b"x", b"9", b" ", b"[", b"{")) * rng.randint(10_000, 300_000)
    return b"\n".join(lines)


def repeat_line(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    at = rng.randrange(len(lines))
    return b"\n".join(lines[:at] + [lines[at]] * rng.randint(2, 500) + lines[at:])


def drop_lines(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    return b"\n".join(ln for ln in lines if rng.random() > 0.3)


def odd_bytes(data: bytes, rng: random.Random) -> bytes:
    """Invalid UTF-8, NUL, BOM, markup and control characters put in at random places."""
    junk = rng.choice((b"\xff", b"\x00", b"\xef\xbb\xbf", b"\xc3", b"[/]", b"\x1b[31m", b"\t", b"\\", b'"', b"{", b"}"))
    at = rng.randrange(len(data) + 1)
    return data[:at] + junk + data[at:]


MUTATIONS: Sequence[Callable[[bytes, random.Random], bytes]] = (
    flip_bytes, splice, huge_number, unicode_digits, extreme_stamp, line_ends, truncate, long_line,
    repeat_line, drop_lines, odd_bytes, huge_number, unicode_digits, extreme_stamp,
)


def mutated(rng: random.Random, most_lines: int = 40, limit: int = 16 * 1024) -> bytes:
    """A window of a random seed with one to four mutations applied, cut to ``limit`` bytes."""
    data = window(rng.choice(seeds()), rng, most_lines)
    for _ in range(rng.randint(1, 4)):
        data = rng.choice(MUTATIONS)(data, rng)[:limit]
    return data
