"""Feeding mutated inputs to the parsers and to the whole ingest -> analyze -> plan path.

A finding is an exception that is not one of the project's own recorded input errors, or a file
whose parser failed (a bad token must drop its row, never the file). Inputs are fed many at a
time (one batch read of all the line parsers, as ingest reads small files), and a failing batch
is read again input by input to name the culprit.
"""

from __future__ import annotations

import gzip
import json
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from toranalyze.cli import cli
from toranalyze.errors import FAULTS, InputError, ToranalyzeError
from toranalyze.ingest.reader import read_document_events, read_text_events
from toranalyze.ingest.registry import default_registry
from toranalyze.ingest.streams import looks_binary


@dataclass(frozen=True)
class Finding:
    where: str  # the parser or stage
    error: str  # exception type and first line
    input: bytes  # the smallest input known to give it

    def __str__(self) -> str:
        return f"{self.where}: {self.error} on {self.input[:300]!r}"


def _brief(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else ''}"


def write_inputs(inputs: Sequence[bytes], folder: Path, suffix: str = ".log", name: str | None = None) -> list[str]:
    """The inputs as files in ``folder`` (``name``: the one input's file name)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, data in enumerate(inputs):
        path = folder / (name or f"in{k:05d}{suffix}")
        path.write_bytes(data)
        paths.append(str(path))
    return paths


FORCED = 128  # one input in FORCED is also read by every document parser, as --parser forces it


def parse_inputs(inputs: Sequence[bytes], folder: Path) -> list[Finding]:
    """Every line parser over the text inputs joined into one log (one parse call for all: the
    fixed cost of a query is paid once), and each document parser over the inputs it claims (and
    over a sample of the others, as ``--parser`` forces it). A failing log is cut in halves until
    the inputs at fault are found."""
    registry = default_registry()
    text = [data for data in inputs if data and not looks_binary(data[:16384])]
    findings = _joined(text, folder, registry.line_parsers())
    for parser in registry.parsers():
        if not hasattr(parser, "parse"):
            continue
        for k, data in enumerate(text):
            if k % FORCED == 0 or parser.sniff(data[:16384].decode("utf-8", errors="replace")):
                path = folder / "docs" / f"in{k:05d}.log"
                if not path.exists():
                    write_inputs([data], path.parent, name=path.name)
                findings += _document(parser, str(path), data)
    return findings


def _joined(inputs: Sequence[bytes], folder: Path, parsers: Sequence[object]) -> list[Finding]:
    if not inputs:
        return []
    path = folder / "joined.log"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(d if d.endswith(b"\n") else d + b"\n" for d in inputs))
    try:
        read_text_events(str(path), parsers)
    except FAULTS as exc:
        if len(inputs) == 1:
            return [Finding("line parsers", _brief(exc), inputs[0])]
        half = len(inputs) // 2
        found = _joined(inputs[:half], folder, parsers) + _joined(inputs[half:], folder, parsers)
        return found or [Finding("line parsers", _brief(exc), b"".join(inputs))]  # only together
    return []


def _document(parser: object, path: str, data: bytes) -> list[Finding]:
    try:
        read_document_events(path, parser)
    except InputError:
        return []
    except FAULTS as exc:
        return [Finding(f"document parser {getattr(parser, 'name', '?')}", _brief(exc), data)]
    return []


def run_inputs(inputs: Sequence[bytes], folder: Path) -> list[Finding]:
    """The inputs as one run's files (some compressed, some under nodes/<host>/) through
    ``analyze`` and then ``plan`` on the rates.json it wrote, as the CLI runs them: analyze must
    exit 0 (2 only when nothing could be read), plan 0 or 2 (a rates.json it refuses), no file may
    be lost to a fault of ours, and nothing may escape as a traceback."""
    run = folder / "run"
    for k, data in enumerate(inputs):
        where = run / "nodes" / f"gpu-{k % 3:03d}" if k % 4 == 1 else run
        where.mkdir(parents=True, exist_ok=True)
        if k % 7 == 3:
            (where / f"in{k:04d}.log.gz").write_bytes(gzip.compress(data, compresslevel=1))
        else:
            (where / f"in{k:04d}.log").write_bytes(data)
    out = folder / "out"
    findings = _cli("analyze", [str(run), "-o", str(out), "--no-report", "-q", "-j", "1"], (0, 2))
    summary = out / "summary.json"
    if summary.is_file():
        lost = [f for f in json.loads(summary.read_text())["per_file"] if f["error"] and _lost(f["error"])]
        findings += [Finding("analyze", f"{Path(f['path']).name}: {f['error']}", b"") for f in lost]
    rates = out / "rates.json"
    if rates.is_file():
        findings += _cli("plan", ["--rates", str(rates), "--gpus", "64", "--runs", "20"], (0, 2))
    return findings


def _cli(command: str, args: list[str], codes: tuple[int, ...]) -> list[Finding]:
    result = CliRunner().invoke(cli, [command, *args])
    if isinstance(result.exception, ToranalyzeError):  # the console entry point prints it and exits 2
        return [] if 2 in codes else [Finding(command, _brief(result.exception), b"")]
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        exc = result.exception
        trace = "".join(traceback.format_exception(exc, limit=-4))
        return [Finding(command, _brief(exc) + "\n" + trace, b"")]
    if result.exit_code not in codes:
        return [Finding(command, f"exit {result.exit_code}: {result.output[-500:]}", b"")]
    return []


def _lost(error: str) -> bool:
    """A file lost to a fault of ours (not binary data, which is skipped on purpose)."""
    return not error.startswith("binary data")
