"""One exception hierarchy for the library.

Library code raises these; only ``toranalyze.cli`` turns them into messages
for people. Each error carries where it happened (``path``/``line``) and what
to do next (``hint``), so the CLI can say ``file:line: what — next step``.
"""

from __future__ import annotations

import polars as pl

# What a bug in one file's or one run's handling may raise: any exception, and the panics of the
# dataframe engine's native code (polars raises them as PanicException, a BaseException). Caught
# where one input's failure must not lose the others; KeyboardInterrupt and SystemExit are not.
FAULTS: tuple[type[BaseException], ...] = (Exception, pl.exceptions.PanicException)


class ToranalyzeError(Exception):
    """Base of every error the library raises on purpose."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.hint = hint

    def where(self) -> str:
        if self.path and self.line:
            return f"{self.path}:{self.line}"
        return self.path or ""


class InputError(ToranalyzeError):
    """An input path cannot be read (missing, unreadable, corrupt archive)."""


class ParserError(ToranalyzeError):
    """A parser failed on a file, or parser selection is ambiguous."""


class AmbiguousParserError(ParserError):
    """Several document parsers claim one file."""

    def __init__(self, path: str, candidates: list[str]):
        super().__init__(
            f"several parsers claim this file: {', '.join(candidates)}",
            path=path,
            hint=f"choose one with --parser {candidates[0]} (or another of {', '.join(candidates)})",
        )
        self.candidates = candidates


class PluginError(ToranalyzeError):
    """A parser plugin is broken or shadows another one."""


class SchemaError(ToranalyzeError):
    """A frame does not match its documented schema."""


class RulesError(ToranalyzeError):
    """A classification rules file is malformed."""


class ConfigError(ToranalyzeError):
    """A command-line option or configuration value is invalid."""


class WorkerError(ToranalyzeError):
    """A worker process ended without returning its result (killed, or could not start)."""


class NothingReadError(ToranalyzeError):
    """No input file could be read at all."""


class RatesError(ToranalyzeError):
    """A rates.json document does not follow its schema (the message names the field)."""

    def __init__(self, message: str, *, field: str, path: str | None = None, hint: str | None = None):
        super().__init__(f"{field}: {message}", path=path,
                         hint=hint or "write it again with `toranalyze fleet` or `toranalyze analyze` (docs/rates.md)")
        self.field = field
