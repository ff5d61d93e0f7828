"""A file's decompressed bytes: opening, sniffing and whole-file reads.

gzip, bzip2 and zstd are read as streams (``COMPRESSED``); an object-store URL is read in
ranged requests (``toranalyze.storage``). A truncated or corrupt gzip stream hands out every
byte decoded before the damage.
"""

from __future__ import annotations

import bz2
import io
import os
import stat
import zlib
from typing import IO

from toranalyze import storage
from toranalyze.errors import InputError

HEAD_BYTES = 16 * 1024


class _GzipReader(io.RawIOBase):
    """Incremental gzip reader that hands out every byte decoded before a truncation or corruption.

    ``gzip.GzipFile`` raises on a truncated member without returning what it had already decoded.
    Concatenated members (``cat a.gz b.gz``) are followed.
    """

    def __init__(self, raw: IO[bytes]):
        self._raw = raw
        self._z = zlib.decompressobj(wbits=31)
        self._buf = b""
        self._done = False
        self._pending: Exception | None = None

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = size if size >= 0 else 1 << 62
        while len(self._buf) < want and not self._done:
            data = self._raw.read(1 << 16)
            if not data:
                self._done = True
                if not self._z.eof:
                    self._buf += self._z.flush()
                    if self._buf:
                        out, self._buf = self._buf[:want], self._buf[want:]
                        self._pending = EOFError("compressed stream ended before its end marker")
                        return out
                    raise EOFError("compressed stream ended before its end marker")
                break
            self._buf += self._z.decompress(data)
            while self._z.eof and self._z.unused_data:
                rest = self._z.unused_data
                self._z = zlib.decompressobj(wbits=31)
                self._buf += self._z.decompress(rest)
        if not self._buf and self._pending is not None:
            exc, self._pending = self._pending, None
            raise exc
        out, self._buf = self._buf[:want], self._buf[want:]
        return out

    def close(self) -> None:
        self._raw.close()
        super().close()


COMPRESSED = (".gz", ".bz2", ".zst", ".zstd")  # the suffixes open_stream decompresses

# A compressed file is read up to INFLATE_FLOOR bytes, or INFLATE_RATIO times its own size when
# that is more: logs compress 5-50x, so only a bomb (10 GB of one repeated line in 10 MB) meets it.
# The rest is cut: the lines before the cut are kept and the file's report says why it ended.
INFLATE_FLOOR = 4 * 1024**3
INFLATE_RATIO = 200


class InflateLimit(OSError):
    """A compressed stream decompressed past its bound (INFLATE_FLOOR, INFLATE_RATIO)."""


class _Bounded(io.RawIOBase):
    """A decompressed stream that ends in InflateLimit past ``limit`` bytes."""

    def __init__(self, inner: IO[bytes], limit: int):
        self._inner = inner
        self._left = limit
        self._limit = limit

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            if self._inner.read(1):
                raise InflateLimit(f"decompressed past {self._limit} bytes, {INFLATE_RATIO} times the "
                                   "compressed size or more (a decompression bomb?): the rest was not read")
            return b""
        data = self._inner.read(self._left if size < 0 else min(size, self._left))
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._inner.close()
        super().close()


def _bounded(stream: IO[bytes], raw: IO[bytes], path: str) -> IO[bytes]:
    """``stream`` cut at the bound of a compressed file of ``raw``'s size (an object: the floor)."""
    size = 0 if storage.is_url(path) else os.fstat(raw.fileno()).st_size
    return _Bounded(stream, max(INFLATE_FLOOR, INFLATE_RATIO * size))  # type: ignore[return-value]


def _no_wait(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)  # a FIFO with no writer must not block the open


def _open_regular(path: str) -> IO[bytes]:
    """A local file opened for reading, refused unless it is a regular file (checked on the open
    file, so it cannot be swapped for a FIFO or a device between the check and the read)."""
    raw = open(path, "rb", opener=_no_wait)  # noqa: SIM115 - the caller closes it
    mode = os.fstat(raw.fileno()).st_mode
    if not stat.S_ISREG(mode):
        raw.close()
        raise InputError("not a regular file (a FIFO, socket or device); skipped", path=path,
                         hint="copy what it holds into a regular file and give that")
    os.set_blocking(raw.fileno(), True)
    return raw


def open_stream(path: str) -> IO[bytes]:
    """The file's decompressed bytes as a stream; a URL is read in ranged requests (storage.py).
    A local file that is not regular is refused (InputError)."""
    name = path.lower()
    raw = storage.open_input(path) if storage.is_url(path) else _open_regular(path)
    if name.endswith(".gz"):
        return _bounded(_GzipReader(raw), raw, path)  # type: ignore[arg-type]
    if name.endswith(".bz2"):
        return _bounded(bz2.BZ2File(raw), raw, path)
    if name.endswith(".zst") or name.endswith(".zstd"):
        import zstandard

        return _bounded(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True), raw, path)
    return raw


STREAM_ERRORS = (EOFError, OSError, zlib.error, ValueError)


def read_head(path: str, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` decompressed bytes of a file (for sniffing)."""
    try:
        with open_stream(path) as fh:
            return fh.read(size)
    except FileNotFoundError as exc:
        raise InputError("no such file", path=path, hint="check the path") from exc
    except PermissionError as exc:
        raise InputError("permission denied", path=path, hint="check the file's permissions") from exc
    except STREAM_ERRORS as exc:
        raise InputError(f"cannot read: {exc}", path=path, hint="check that the file is not corrupt") from exc


def looks_binary(head: bytes) -> bool:
    """Whether a file's head looks like binary data rather than text (a NUL byte, or under 85%
    printable bytes)."""
    if not head:
        return False
    if b"\x00" in head[:4096]:
        return True
    sample = head[:4096]
    printable = len(sample) - len(sample.translate(None, _PRINTABLE))
    return printable / len(sample) < 0.85


_PRINTABLE = bytes(b for b in range(256) if b >= 32 or b in (9, 10, 13))  # deleted to count them


def _count_lines(path: str) -> int:
    try:
        with open_stream(path) as fh:
            n = 0
            last = b""
            for block in iter(lambda: fh.read(1 << 20), b""):
                n += block.count(b"\n")
                last = block
            return n + (1 if last and not last.endswith(b"\n") else 0)
    except STREAM_ERRORS:
        return 0


# Line counts of files a document parser read through read_text, so the file is not read twice.
_DOCUMENT_LINES: dict[str, int] = {}


def document_lines(path: str) -> int:
    """The lines of a file a document parser read: counted by ``read_text`` when it read the
    file (once: the count is forgotten), else counted now."""
    lines = _DOCUMENT_LINES.pop(path, None)
    if lines is None:  # the parser read the file its own way
        lines = _count_lines(path)
    return lines


def read_text(path: str) -> str:
    """Whole decompressed file as text, for document parsers (JSON/YAML/sacct tables are small)."""
    with open_stream(path) as fh:
        data = fh.read()
        try:
            fh.read(1)  # past a bound (InflateLimit) there is more: the document is not whole
        except InflateLimit as exc:
            raise InputError(str(exc), path=path, hint="decompress it yourself and give the part you need") from None
    _DOCUMENT_LINES[path] = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return data.decode("utf-8", errors="replace")
