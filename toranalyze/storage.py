"""Where inputs are read and outputs written: local paths, or object-store URLs (docs/storage.md).

A URL (``s3://bucket/key``, ``gs://``, ``az://container/key``, ``abfs://``, ``hdfs://``,
``file:///abs/path``) goes through ``pyarrow.fs`` (a dependency already: nothing more to
install). Credentials and endpoints come from the environment the way each store's own SDK reads
them (``AWS_*``, ``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_*``): this
module never handles a secret. A prefix is listed like a local folder, so discovery applies the
same rules to keys as to paths. Objects are read as streams in ranged requests of ``READ_BUFFER``
bytes: nothing is downloaded whole. Outputs for a URL are written to a local staging folder and
uploaded when complete (``output_dir``).
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO, Any

from toranalyze.errors import ConfigError, InputError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.S)
READ_BUFFER = 8 * 1024 * 1024  # bytes per ranged read of an object (the stream's buffer)


def is_url(spec: str) -> bool:
    # (the substring test first: a fleet's re-run asks this of every file it checks)
    return "://" in spec and _SCHEME.match(spec) is not None


def _split(url: str) -> tuple[str, str, str]:
    """'s3://bucket/a/b' -> ('s3', 'bucket', 'a/b')."""
    m = _SCHEME.match(url)
    assert m is not None, url
    scheme, rest = m.group(1).lower(), m.group(2)
    if scheme == "file":
        return scheme, "", "/" + rest.lstrip("/")
    authority, _, key = rest.partition("/")
    return scheme, authority, key


def key_of(spec: str) -> str:
    """The part of a path or URL that names folders and the file: the key of a URL (no scheme,
    bucket or host), so path rules (the node folder, the file name) read keys as they read paths."""
    return _split(spec)[2] if is_url(spec) else spec


def _build(scheme: str, authority: str, key: str) -> str:
    key = key.strip("/")
    if scheme == "file":
        return f"file:///{key}"
    return f"{scheme}://{authority}/{key}" if key else f"{scheme}://{authority}"


def root(url: str) -> str:
    """The URL's scheme and authority ('s3://bucket'), which keys are joined to."""
    scheme, authority, _ = _split(url)
    return _build(scheme, authority, "")


def join(base: str, rel: str) -> str:
    if not is_url(base):
        return os.path.join(base, rel)
    scheme, authority, key = _split(base)
    return _build(scheme, authority, posixpath.join(key, rel) if key.strip("/") else rel)


def name(spec: str) -> str:
    """The last component ('run42' for 's3://b/runs/run42/'; the bucket for 's3://b')."""
    if is_url(spec):
        _, authority, key = _split(spec)
        return posixpath.basename(key.rstrip("/")) or authority
    return Path(spec).name


def parent(spec: str) -> str:
    if is_url(spec):
        scheme, authority, key = _split(spec)
        return _build(scheme, authority, posixpath.dirname(key.rstrip("/")))
    return str(Path(spec).parent)


def normalize(spec: str) -> str:
    """A URL without '.', '..', doubled or trailing slashes; a path as os.path.normpath."""
    if not is_url(spec):
        return os.path.normpath(spec)
    scheme, authority, key = _split(spec)
    key = posixpath.normpath("/" + key) if key.strip("/") else ""
    return _build(scheme, authority, key)


@lru_cache(maxsize=32)
def _filesystem(scheme: str, authority: str) -> Any:
    import pyarrow.fs as pafs

    if scheme == "file":
        return pafs.LocalFileSystem()
    if scheme == "az":  # polars' spelling: az://container/key, the account from the environment
        account = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
        if not account:
            raise ConfigError("az:// URLs need the storage account", path=f"az://{authority}",
                              hint="set AZURE_STORAGE_ACCOUNT_NAME (and AZURE_STORAGE_ACCOUNT_KEY or a login)")
        return pafs.AzureFileSystem(account_name=account, account_key=os.environ.get("AZURE_STORAGE_ACCOUNT_KEY"))
    try:
        fs, _ = pafs.FileSystem.from_uri(f"{scheme}://{authority}")
    except (OSError, ValueError) as exc:  # pyarrow.lib.ArrowInvalid is a ValueError
        raise _error(exc, f"{scheme}://{authority}") from exc
    return fs


def locate(url: str) -> tuple[Any, str]:
    """The pyarrow filesystem of a URL and the path it knows the object by."""
    scheme, authority, key = _split(url)
    if scheme in ("file", "s3", "gs", "gcs", "az"):  # one filesystem per bucket, kept
        fs = _filesystem(scheme, authority)
        # buckets and containers are the first component of the path the filesystem knows
        return fs, key if scheme == "file" else f"{authority}/{key}".rstrip("/")
    import pyarrow.fs as pafs

    try:  # abfs, hdfs...: pyarrow maps the URL to its path (the container may sit in the authority)
        fs, path = pafs.FileSystem.from_uri(url)
    except (OSError, ValueError) as exc:
        raise _error(exc, url) from exc
    return fs, path


def _error(exc: BaseException, url: str) -> InputError:
    """A store's failure as an InputError naming the URL and what to do next."""
    text = str(exc)
    low = text.lower()
    if isinstance(exc, FileNotFoundError) or "not found" in low or "nosuchbucket" in low or "no such" in low:
        hint = "check the bucket and key (list them with your store's CLI, e.g. `aws s3 ls URL`)"
        return InputError("no such bucket, object or prefix", path=url, hint=hint)
    if any(w in low for w in ("credential", "access_denied", "accessdenied", "forbidden", "403",
                              "invalidaccesskeyid", "signature", "expiredtoken", "unauthori")):
        return InputError(f"access denied ({text.splitlines()[0]})", path=url,
                          hint="set the store's credentials in the environment (AWS_ACCESS_KEY_ID/"
                               "AWS_SECRET_ACCESS_KEY or AWS_PROFILE, AWS_ENDPOINT_URL for other S3 stores; "
                               "GOOGLE_APPLICATION_CREDENTIALS; AZURE_STORAGE_ACCOUNT_KEY) and check its permissions")
    if "unrecognized filesystem" in low or "unsupported" in low and "scheme" in low:
        return InputError(f"unsupported URL scheme ({text.splitlines()[0]})", path=url,
                          hint="use a local path or s3://, gs://, az://, abfs://, hdfs://, file:// (docs/storage.md)")
    return InputError(f"cannot reach the store: {text.splitlines()[0] if text else type(exc).__name__}", path=url,
                      hint="check the URL, the network and the store's endpoint (AWS_ENDPOINT_URL for S3-compatible "
                           "stores)")


def missing(url: str) -> InputError:
    """The error for a URL under which nothing is stored: a missing bucket, or a missing key."""
    scheme, authority, key = _split(url)
    if scheme != "file" and (not key.strip("/") or stat(root(url)) is None):
        return InputError(f"no such bucket or container {authority!r}", path=url,
                          hint="check the bucket name (and for S3-compatible stores, AWS_ENDPOINT_URL)")
    return InputError("no such object or prefix", path=url, hint="check the bucket and key")


@dataclass(frozen=True)
class Entry:
    path: str  # path or URL
    size: int
    mtime: float  # seconds since the epoch (0 when the store gives none)
    is_dir: bool = False


def stat(spec: str) -> Entry | None:
    """The file or folder (a prefix with objects under it) ``spec`` names; None when nothing is there."""
    if not is_url(spec):
        try:
            st = os.stat(spec)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InputError(f"cannot stat: {exc.strerror}", path=spec) from exc
        return Entry(spec, st.st_size, st.st_mtime, os.path.isdir(spec))
    import pyarrow.fs as pafs

    fs, path = locate(spec)
    try:
        info = fs.get_file_info(path)
    except OSError as exc:
        raise _error(exc, spec) from exc
    if info.type == pafs.FileType.NotFound:
        return None
    is_dir = info.type == pafs.FileType.Directory
    return Entry(spec, 0 if is_dir else int(info.size or 0), _seconds(info.mtime), is_dir)


def _seconds(mtime: Any) -> float:
    return 0.0 if mtime is None else float(mtime.timestamp())


def _walk_key(rel: str) -> tuple[tuple[int, str], ...]:
    """Sort key giving os.walk's top-down order with sorted names: a folder's own files first,
    then each sub-folder in name order."""
    parts = rel.split("/")
    return (*((1, d) for d in parts[:-1]), (0, parts[-1]))


def list_files(url: str) -> list[Entry]:
    """Every object under the prefix ``url``, in the order a local folder is walked
    (discover._walk), leaving out those under hidden folders (a name starting with '.')."""
    import pyarrow.fs as pafs

    fs, path = locate(url)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=False))
    except OSError as exc:
        raise _error(exc, url) from exc
    found: list[tuple[str, Entry]] = []
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        rel = info.path[len(path.rstrip("/")) + 1:]
        if any(d.startswith(".") for d in rel.split("/")[:-1]):
            continue
        found.append((rel, Entry(join(url, rel), int(info.size or 0), _seconds(info.mtime))))
    found.sort(key=lambda pair: _walk_key(pair[0]))
    return [e for _, e in found]


def open_input(spec: str) -> IO[bytes]:
    """A binary stream of the file's bytes as stored (no decompression: the reader does that)."""
    if not is_url(spec):
        return open(spec, "rb")  # noqa: SIM115 - the caller closes it
    fs, path = locate(spec)
    try:
        stream: IO[bytes] = fs.open_input_stream(path, compression=None, buffer_size=READ_BUFFER)
    except OSError as exc:
        raise _error(exc, spec) from exc
    return stream


def upload(local: Path, url: str) -> None:
    """Copy one local file to ``url`` (streamed; an object appears whole when its upload completes)."""
    import pyarrow.fs as pafs

    fs, path = locate(url)
    try:
        if isinstance(fs, pafs.LocalFileSystem):  # object stores have no folders to make
            fs.create_dir(posixpath.dirname(path), recursive=True)
        with open(local, "rb") as src, fs.open_output_stream(path) as dst:
            shutil.copyfileobj(src, dst, READ_BUFFER)
    except OSError as exc:
        raise _error(exc, url) from exc


def download(url: str, local: Path) -> None:
    local.parent.mkdir(parents=True, exist_ok=True)
    with open_input(url) as src, open(local, "wb") as dst:
        shutil.copyfileobj(src, dst, READ_BUFFER)


def delete(url: str) -> None:
    fs, path = locate(url)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _error(exc, url) from exc


def sink_parquet(table: Any, path: Path, row_group_size: int) -> None:
    """Stream a lazy table (``polars.LazyFrame``) into the Parquet file ``path``: written under a
    temporary name and renamed, so the file is whole or absent."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        table.sink_parquet(tmp, row_group_size=row_group_size)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _local_files(root: Path) -> dict[str, tuple[int, int]]:
    """rel path -> (size, mtime_ns) of every file under ``root``."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            st = os.stat(os.path.join(dirpath, f))
            out[os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")] = (st.st_size, st.st_mtime_ns)
    return out


def _writable(folder: Path) -> None:
    """Create ``folder`` and write a scratch file in it, so a destination that cannot be written
    fails before the work starts, not after it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise ConfigError(f"cannot write the output here: {reason}", path=str(folder),
                          hint="give a folder you can write to with -o") from exc


@contextmanager
def output_dir(spec: str, *, mirror: bool = False, last: tuple[str, ...] = ()) -> Iterator[Path]:
    """A local folder to write a command's outputs into.

    For a path, that folder itself. For a URL, a staging folder whose files are uploaded to the
    URL once the block ends without error (files written or changed there, ``last`` ones after
    the others: a commit point such as the fleet manifest goes up when everything it names is
    there), then deleted. With ``mirror`` the staging folder starts as a copy of what is under
    the URL, and objects whose local file was deleted are deleted from the store at the end (so
    an incremental store such as the fleet's works unchanged)."""
    if not is_url(spec):
        if Path(spec).exists() and not Path(spec).is_dir():
            raise ConfigError("the output is a file, not a directory", path=spec, hint="give a directory with -o")
        _writable(Path(spec))
        yield Path(spec)
        return
    spec = normalize(spec)
    if _split(spec)[0] != "file" and stat(root(spec)) is None:  # before the work, not after it
        raise missing(root(spec))
    with tempfile.TemporaryDirectory(prefix="toranalyze-out-") as tmp:
        stage = Path(tmp)
        if mirror and (found := stat(spec)) is not None and found.is_dir:
            for e in list_files(spec):
                download(e.path, stage / e.path[len(spec) + 1:])
        before = _local_files(stage)
        yield stage
        after = _local_files(stage)
        changed = sorted((r for r in after if before.get(r) != after[r]), key=lambda r: (r in last, r))
        for rel in changed:
            upload(stage / rel, join(spec, rel))
        for rel in sorted(set(before) - set(after)):
            delete(join(spec, rel))
