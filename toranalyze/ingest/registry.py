"""The parsers installed: discovery through entry points, the registry, the choice for a file.

Built-in parsers are registered through the same entry-point group (``toranalyze.parsers``)
that a third-party distribution uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from toranalyze.errors import AmbiguousParserError, ConfigError, PluginError
from toranalyze.ingest.contract import Parser

ENTRY_POINT_GROUP = "toranalyze.parsers"


@dataclass(frozen=True)
class Registered:
    parser: Any
    distribution: str
    version: str
    entry_point: str


def _entry_point_parsers() -> list[Registered]:
    found: list[Registered] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin must not hide the others
            raise PluginError(
                f"parser plugin {ep.name!r} ({ep.value}) failed to import: {exc}",
                hint="reinstall or uninstall the distribution that provides it",
            ) from exc
        parser = obj() if isinstance(obj, type) else obj
        dist = ep.dist.name if ep.dist else "?"
        version = ep.dist.version if ep.dist else "?"
        found.append(Registered(parser, dist, version, ep.value))
    return found


class Registry:
    """Name -> parser, refusing silent shadowing."""

    def __init__(self, entries: list[Registered] | None = None):
        self._by_name: dict[str, Registered] = {}
        for entry in entries or []:
            self.add(entry)

    def add(self, entry: Registered) -> None:
        parser = entry.parser
        missing = [a for a in ("name", "source", "sniff", "extract", "parse") if not hasattr(parser, a)]
        if missing:
            raise PluginError(f"parser from {entry.entry_point} lacks {', '.join(missing)}")
        name = parser.name
        if name in self._by_name:
            other = self._by_name[name]
            if other.entry_point == entry.entry_point:
                return  # the same plugin seen twice (e.g. editable + site install)
            raise PluginError(
                f"two parsers are named {name!r}: {other.entry_point} ({other.distribution}) and "
                f"{entry.entry_point} ({entry.distribution})",
                hint="uninstall one of the distributions; parser names must be unique",
            )
        self._by_name[name] = entry

    def register(self, parser: Any, distribution: str = "(in-process)", version: str = "") -> None:
        self.add(Registered(parser, distribution, version, f"{type(parser).__module__}.{type(parser).__name__}"))

    def get(self, name: str) -> Any:
        try:
            return self._by_name[name].parser
        except KeyError:
            raise ConfigError(
                f"no parser named {name!r}", hint=f"known parsers: {', '.join(sorted(self._by_name))}"
            ) from None

    def entries(self) -> list[Registered]:
        return sorted(self._by_name.values(), key=lambda e: (getattr(e.parser, "priority", 100), e.parser.name))

    def parsers(self) -> list[Any]:
        return [e.parser for e in self.entries()]

    def line_parsers(self) -> list[Any]:
        return [p for p in self.parsers() if _has_line_rules(p)]

    def claimants(self, head: str) -> list[str]:
        out = []
        for p in self.parsers():
            try:
                if p.sniff(head):
                    out.append(p.name)
            except Exception:  # a sniff that throws claims nothing
                continue
        return out

    def binary_claimant(self, head: bytes) -> Any | None:
        """The parser that claims a binary file by its first bytes (``sniff_bytes``), if one does."""
        for p in self.parsers():
            sniff = getattr(p, "sniff_bytes", None)
            try:
                if sniff is not None and sniff(head):
                    return p
            except Exception:  # a sniff that throws claims nothing
                continue
        return None

    def choose(self, path: str, head: str, forced: str | None = None) -> tuple[str, list[Any]]:
        """Return ('document', [parser]) or ('text', [line parsers]) for a file."""
        if forced:
            return "forced", [self.get(forced)]
        claims = self.claimants(head)
        if len(claims) > 1:
            raise AmbiguousParserError(path, claims)
        if claims:
            return "document", [self.get(claims[0])]
        return "text", self.line_parsers()


def _has_line_rules(parser: Any) -> bool:
    fn = getattr(type(parser), "extract", None)
    return fn is not None and fn is not Parser.extract


_default: Registry | None = None


def default_registry(refresh: bool = False) -> Registry:
    """The registry of every installed parser (built-ins included), cached."""
    global _default
    if _default is None or refresh:
        _default = Registry(_entry_point_parsers())
    return _default
