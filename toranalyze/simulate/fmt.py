"""Timestamp formats of the real tools (fast, cached per day; UTC)."""

from __future__ import annotations

import datetime as dt
from functools import lru_cache

US = 1_000_000
DAY = 86400
_MON = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@lru_cache(maxsize=4096)
def _day(day: int) -> tuple[int, int, int]:
    d = dt.date(1970, 1, 1) + dt.timedelta(days=day)
    return d.year, d.month, d.day


def _parts(us: int) -> tuple[int, int, int, int, int, int, int]:
    sec, frac = divmod(int(us), US)
    day, s = divmod(sec, DAY)
    y, mo, d = _day(day)
    h, s = divmod(s, 3600)
    mi, s = divmod(s, 60)
    return y, mo, d, h, mi, s, frac


def bracket(us: int) -> str:
    """2024-03-04 08:00:12 (Megatron, ``datetime:`` banners)."""
    y, mo, d, h, mi, s, _ = _parts(us)
    return f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}"


def iso(us: int) -> str:
    """2024-03-04T08:00:12 (sacct, slurmstepd)."""
    y, mo, d, h, mi, s, _ = _parts(us)
    return f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}"


def iso_ms(us: int) -> str:
    """2024-03-04T08:00:12.123 (slurmctld)."""
    y, mo, d, h, mi, s, f = _parts(us)
    return f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}.{f // 1000:03d}"


def iso_z(us: int) -> str:
    """2024-03-04T08:00:12Z (Kubernetes)."""
    return iso(us) + "Z"


def syslog(us: int) -> str:
    """Mar  4 08:00:12 (syslog, no year)."""
    _, mo, d, h, mi, s, _ = _parts(us)
    return f"{_MON[mo - 1]} {d:2d} {h:02d}:{mi:02d}:{s:02d}"


def glog(us: int) -> str:
    """0304 08:00:12.123456 (after the level letter of a glog line)."""
    _, mo, d, h, mi, s, f = _parts(us)
    return f"{mo:02d}{d:02d} {h:02d}:{mi:02d}:{s:02d}.{f:06d}"


def torchelastic_time(us: int) -> str:
    """2024-03-04_08:00:12 (ChildFailedError ``time :`` field)."""
    y, mo, d, h, mi, s, _ = _parts(us)
    return f"{y:04d}-{mo:02d}-{d:02d}_{h:02d}:{mi:02d}:{s:02d}"


def hms(seconds: int) -> str:
    """Elapsed as sacct prints it: [D-]HH:MM:SS."""
    seconds = int(seconds)
    d, s = divmod(seconds, DAY)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def hostlist(hosts: list[str]) -> str:
    """Compress gpu-001,gpu-002,gpu-004 -> gpu-[001-002,004] (Slurm hostlist syntax)."""
    if len(hosts) == 1:
        return hosts[0]
    prefix = hosts[0].rsplit("-", 1)[0]
    nums = sorted(int(h.rsplit("-", 1)[1]) for h in hosts)
    width = len(hosts[0].rsplit("-", 1)[1])
    ranges: list[str] = []
    start = prev = nums[0]
    for n in [*nums[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        ranges.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
        if n is not None:
            start = prev = n
    return f"{prefix}-[{','.join(ranges)}]"
