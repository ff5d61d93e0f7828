"""``rates.json``: the fitted rates a planner reads (schema in ``rates.schema.json``, docs/rates.md).

``build_rates`` is pure (the four fleet frames in, a JSON-ready dict out); ``dumps`` is
deterministic (sorted keys, fixed rounding); ``check_rates`` validates a loaded document against
the shipped JSON Schema with a small walker of the keywords it uses, so reading needs no extra
dependency, and raises :class:`RatesError` naming the first offending field. ``read_rates`` reads a
file with bounds on its size and on the wait for a pipe, so no device or FIFO can hang or fill memory.
"""

from __future__ import annotations

import json
import math
import os
import re
import selectors
import stat
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import polars as pl

from toranalyze import __version__
from toranalyze.errors import InputError, RatesError
from toranalyze.fleet import fit
from toranalyze.fleet.lemons import lemon_nodes

SCHEMA_VERSION = 1
MTBF_SIZES = (8, 64, 512, 1024, 4096, 16384, 131072)


def gpus_per_node(exposure: pl.DataFrame) -> float:
    """The fleet's usual GPUs per node (median over node rows that state a count; 8 when none
    does: a run whose records name hosts but no GPU count, as excerpts often do)."""
    g = exposure.filter(pl.col("node").is_not_null() & (pl.col("gpus") > 0))["gpus"]
    return float(g.median()) if g.len() else 8.0  # type: ignore[arg-type]


def exposure_totals(jobs: pl.DataFrame, exposure: pl.DataFrame) -> dict[str, Any]:
    att = fit.attempt_exposure(exposure)
    node_hours = float(exposure["node_hours"].sum())
    return {
        "gpu_hours": fit._r(float(exposure["gpu_hours"].sum())),
        "node_hours": fit._r(node_hours),
        "job_hours": fit._r(float(att["hours"].sum())),
        "node_days": fit._r(node_hours / 24.0),
        "jobs": int(max(jobs.height, att.select("run", "job").n_unique() if att.height else 0)),
        "attempts": int(att.height),
        "nodes": int(exposure["node"].drop_nulls().n_unique()),
    }


def _observed_by_size(fail: pl.DataFrame, jobs_e: pl.DataFrame, exposure: pl.DataFrame) -> list[dict[str, Any]]:
    """Observed mean running hours between unexpected failures per job-size bucket."""
    # (jobs of unknown size are in no bucket)
    sc = fit.scope_rates(fail, jobs_e, exposure).filter(
        (pl.col("scope") == "job_gpus") & (pl.col("key") != fit.UNKNOWN_SIZE))
    rows = []
    for r in sc.sort(pl.col("key").cast(pl.Int64)).iter_rows(named=True):
        inv = {k: (1.0 / r[f"{k}_job_hour"] if r[f"{k}_job_hour"] and r[f"{k}_job_hour"] > 0 else None)
               for k in ("rate", "lo", "hi")}
        rows.append({"gpus_bucket": int(r["key"]), "failures": int(r["failures"]), "job_hours": fit._r(r["job_hour"]),
                     "mtbf_hours": fit._r(inv["rate"]), "lo": fit._r(inv["hi"]), "hi": fit._r(inv["lo"])})
    return rows


def build_rates(jobs: pl.DataFrame, attempts: pl.DataFrame, incidents: pl.DataFrame,
                exposure: pl.DataFrame) -> dict[str, Any]:
    """The rates document of one fleet (or one run) from frames of the fleet schemas."""
    gpn = gpus_per_node(exposure)
    fail = fit.failures(incidents, exposure)
    jobs_e = fit.job_exposure(exposure)
    classes = {
        str(c): fit.fit_class(fail.filter(pl.col("failure_class") == c), jobs_e, gpn)
        for c in sorted(fail["failure_class"].unique().to_list())
    }
    n_fail = max(1, fail.height)
    for name, c in classes.items():
        c["share"] = fit._r(c["failures"] / n_fail)  # of all unexpected failures
        c["scaling"] = fit.scaling(name, c)
    totals = exposure_totals(jobs, exposure)
    sizes = sorted({*MTBF_SIZES, *(int(g) for g in jobs_e["gpus"].drop_nulls().unique().to_list() if g > 0)})
    return {
        "schema_version": SCHEMA_VERSION,
        "generator": f"toranalyze {__version__}",
        "confidence": fit.CONF,
        "gpus_per_node": gpn,
        "exposure": totals,
        "classes": classes,
        "unexpected": fit.fit_class(fail, jobs_e, gpn),
        "planned": fit.planned_stops(incidents, float(totals["job_hours"] or 0.0)),
        "mtbf_vs_job_size": {"predicted": fit.mtbf_table(classes, sizes, gpn),
                             "observed": _observed_by_size(fail, jobs_e, exposure)},
        "scopes": fit.scope_records(fit.all_scopes(fail, jobs_e, exposure)),
        "downtime": fit.distributions(incidents, attempts),
        "lemon_nodes": lemon_nodes(incidents, exposure),
        "fail_slow": fail_slow(jobs, float(totals["job_hours"] or 0.0)),
    }


def fail_slow(jobs: pl.DataFrame, job_hours: float) -> dict[str, Any]:
    """Running time lost to slowness (steps slower than the job's healthy median: slow periods,
    stragglers, jitter), as hours and as a fraction of running time: the throughput a planner
    should expect to lose apart from failures."""
    slow_h = float(jobs["slowdown_s"].fill_null(0.0).sum()) / 3600.0 if "slowdown_s" in jobs.columns else 0.0
    return {"slow_hours": fit._r(slow_h), "running_hours": fit._r(job_hours),
            "loss_fraction": fit._r(min(1.0, slow_h / job_hours)) if job_hours > 0 else None}


def dumps(doc: dict[str, Any]) -> str:
    """Deterministic JSON text (sorted keys, no NaN: non-finite numbers must already be null)."""
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=True, allow_nan=False) + "\n"


@cache
def rates_schema() -> dict[str, Any]:
    """The JSON Schema shipped with the package (``toranalyze/fleet/rates.schema.json``)."""
    text = (resources.files("toranalyze") / "fleet" / "rates.schema.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


_TYPES: dict[str, tuple[type, ...]] = {"object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
                                       "integer": (int,), "number": (int, float), "null": (type(None),)}


def _type_ok(value: Any, types: str | list[str]) -> bool:
    names = [types] if isinstance(types, str) else types
    return any(isinstance(value, _TYPES[t]) and not (isinstance(value, bool) and t in ("integer", "number"))
               for t in names)


def _walk(value: Any, sch: dict[str, Any], where: str, root: dict[str, Any]) -> None:
    if "$ref" in sch:
        sch = root["$defs"][sch["$ref"].rsplit("/", 1)[-1]]
    for sub in sch.get("allOf", []):
        _walk(value, sub, where, root)
    if "anyOf" in sch:
        errors = []
        for sub in sch["anyOf"]:
            try:
                _walk(value, sub, where, root)
                break
            except RatesError as e:
                errors.append(e)
        else:
            raise errors[-1]
    if "type" in sch and not _type_ok(value, sch["type"]):
        raise RatesError(f"expected {sch['type']}, got {type(value).__name__}", field=where)
    if "const" in sch and value != sch["const"]:
        raise RatesError(f"must be {sch['const']!r}, got {value!r}", field=where)
    if "enum" in sch and value not in sch["enum"]:
        raise RatesError(f"must be one of {sch['enum']}, got {value!r}", field=where)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or ("minimum" in sch and value < sch["minimum"]):
            raise RatesError(f"must be a finite number >= {sch.get('minimum', '-inf')}, got {value!r}", field=where)
        if "maximum" in sch and value > sch["maximum"]:
            raise RatesError(f"must be a number <= {sch['maximum']}, got {value!r}", field=where)
        if "exclusiveMinimum" in sch and value <= sch["exclusiveMinimum"]:
            raise RatesError(f"must be a number > {sch['exclusiveMinimum']}, got {value!r}", field=where)
    if isinstance(value, dict):
        for key in sch.get("required", []):
            if key not in value:
                raise RatesError("missing", field=f"{where}.{key}")
        props = sch.get("properties", {})
        extra = sch.get("additionalProperties")
        for key, v in value.items():
            if key in props:
                _walk(v, props[key], f"{where}.{key}", root)
            elif isinstance(extra, dict):
                _walk(v, extra, f"{where}.{key}", root)
    if isinstance(value, list) and "items" in sch:
        for i, v in enumerate(value):
            _walk(v, sch["items"], f"{where}[{i}]", root)


def check_rates(doc: Any) -> dict[str, Any]:
    """Validate a rates document; returns it. Raises RatesError naming the first bad field."""
    if not isinstance(doc, dict):
        raise RatesError("the document must be a JSON object", field="$")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise RatesError(f"this toranalyze reads version {SCHEMA_VERSION}, got {doc.get('schema_version')!r}",
                         field="schema_version")
    root = rates_schema()
    _walk(doc, root, "$", root)
    return doc


MAX_RATES_BYTES = 16 * 2**20  # a rates.json is at most a few MB; the bound keeps devices out of memory
PIPE_IDLE_S = 3.0  # how long a pipe or device may stay silent (a FIFO no one writes to)
MAX_INT = 2**63  # counts beyond 64-bit integers are no counts (and overflow floats further on)
_RATES_HINT = "write it again with `toranalyze fleet` or `toranalyze analyze` (docs/rates.md)"


def _refuse(message: str, path: str | None, line: int | None = None, hint: str | None = None) -> NoReturn:
    err = RatesError(message, field="$", path=path, hint=hint)
    err.line = line
    raise err


# poll, not epoll: epoll refuses devices that are always readable (/dev/zero)
_Selector = getattr(selectors, "PollSelector", selectors.SelectSelector)


def _read_stream(path: str) -> bytes:
    """A pipe or device, read without blocking: up to one byte past the size bound, giving up
    when it stays silent for ``PIPE_IDLE_S`` (opening a FIFO non-blocking does not wait for a writer)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks: list[bytes] = []
    size = 0
    try:
        with _Selector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while size <= MAX_RATES_BYTES:
                if not sel.select(PIPE_IDLE_S):
                    raise InputError(f"nothing to read for {PIPE_IDLE_S:g} s (a FIFO no one writes to?)", path=path,
                                     hint="give the rates.json file itself")
                try:
                    chunk = os.read(fd, min(2**20, MAX_RATES_BYTES + 1 - size))
                except BlockingIOError:
                    continue
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _read_bounded(path: str) -> bytes:
    too_big = InputError(f"larger than {MAX_RATES_BYTES // 2**20} MB: not a rates.json", path=path,
                         hint="give the rates.json written by `toranalyze fleet` or `toranalyze analyze`")
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise InputError("is a folder", path=path, hint="give the rates.json inside it")
        if not stat.S_ISREG(st.st_mode):
            data = _read_stream(path)
        elif st.st_size > MAX_RATES_BYTES:
            raise too_big
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_RATES_BYTES + 1)  # (it may have grown since)
    except OSError as e:
        raise InputError(f"cannot read it ({e.strerror or e})", path=path,
                         hint="check the path and its permissions") from e
    if len(data) > MAX_RATES_BYTES:
        raise too_big
    return data


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        where = data.count(b"\n", 0, e.start) + 1
        if data.startswith(b"\x1f\x8b"):
            _refuse("not UTF-8 text: a gzip file", path, hint="decompress it first (gunzip)")
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            _refuse("not UTF-8 text: UTF-16", path, hint="save it as UTF-8 (iconv -f UTF-16 -t UTF-8)")
        _refuse(f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})", path, where,
                hint=f"save it as UTF-8, or {_RATES_HINT}")


class _BadNumber(ValueError):
    def __init__(self, token: str, why: str):
        super().__init__(why)
        self.token, self.why = token, why


def _int(token: str) -> int:
    digits = len(token.lstrip("-"))
    v = int(token) if digits <= 19 else MAX_INT  # (int() itself refuses over 4300 digits)
    if abs(v) >= MAX_INT:
        raise _BadNumber(token, f"integer of {digits} digits out of range")
    return v


def _float(token: str) -> float:
    if not math.isfinite(v := float(token)):
        raise _BadNumber(token, f"number {token} out of range")
    return v


def _constant(token: str) -> float:
    raise _BadNumber(token, f"{token} is not a number JSON allows")


def _line_of(text: str, token: str) -> int | None:
    m = re.search(r"[:\[,]\s*" + re.escape(token), text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def load_rates(text: str, path: str | None = None) -> dict[str, Any]:
    """Parse and check rates.json text (``path`` only names it in errors). Integers beyond 64
    bits, numbers that overflow a float, NaN and deep nesting are refused like any other bad field."""
    try:
        doc = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as e:
        _refuse(f"not JSON ({e.msg}, column {e.colno})", path, e.lineno)
    except _BadNumber as e:
        _refuse(e.why, path, _line_of(text, e.token))
    except RecursionError:
        _refuse("nested too deeply to be a rates.json", path)
    try:
        return check_rates(doc)
    except RatesError as e:
        e.path = path
        raise


def read_rates(path: str | Path) -> dict[str, Any]:
    """Read and check a rates.json file: at most ``MAX_RATES_BYTES``, UTF-8. Every fault is an
    :class:`InputError` (the file cannot be read) or a :class:`RatesError` (its content)."""
    p = str(path)
    return load_rates(_decode(_read_bounded(p), p), path=p)
