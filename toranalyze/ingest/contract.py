"""What a parser is: the protocol every parser honours and a base class implementing its defaults.

The contract is documented for parser authors in ``toranalyze.parser_api``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import polars as pl

from toranalyze.ingest.reader import read_text_events


@runtime_checkable
class ParserPlugin(Protocol):
    """What the registry requires of a parser: ``name``, ``source``, ``sniff``, ``extract`` and
    ``parse`` (``toranalyze.parser_api`` describes each; the optional members are read with
    defaults)."""

    name: str
    source: str

    def sniff(self, head: str) -> bool: ...

    def extract(self, lines: pl.LazyFrame) -> pl.LazyFrame | None: ...

    def parse(self, path: str) -> pl.LazyFrame: ...


class Parser:
    """Convenience base class; plugins need not inherit from it.

    Its defaults: claims no file (``sniff``), has no line rules (``extract``), and ``parse``
    reads a file through the parser's own line rules (as a text log is read).
    """

    name: str = ""
    source: str = ""
    priority: int = 100
    noise: tuple[str, ...] = ()
    gates: tuple[str, ...] = ()
    # True: ``extract`` may receive the lines of several small files at once (see ``file_key``).
    batched: bool = False

    def sniff(self, head: str) -> bool:
        return False

    def sniff_bytes(self, head: bytes) -> bool:
        """True to claim a binary file (which no text sniff sees) by its first bytes."""
        return False

    def extract(self, lines: pl.LazyFrame) -> pl.LazyFrame | None:
        return None

    def parse(self, path: str) -> pl.LazyFrame:
        return read_text_events(path, [self]).events.lazy()
