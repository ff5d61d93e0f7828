"""Render API objects the way ``kubectl -o yaml`` / ``kubectl -o json`` print them.

kubectl prints unstructured objects, so mapping keys come out sorted:

* YAML through go-yaml v2: keys in its "natural" order (digit runs compare as numbers,
  non-letters before letters), sequences not indented under their key, strings plain
  unless they would read back as another type (``"True"``, ``"8"``, timestamps: double
  quoted) or contain YAML indicators (``': '``, a leading ``[``: single quoted), and
  plain or single-quoted strings folded at spaces once a line passes 80 columns.
* JSON through encoding/json ``MarshalIndent`` with four spaces: byte-ordered keys and
  ``<``, ``>``, ``&`` escaped as ``\\u003c``, ``\\u003e``, ``\\u0026``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

WIDTH = 80

_NULL = {"", "~", "null", "Null", "NULL"}
_BOOL = {
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE",
    "on", "On", "ON", "off", "Off", "OFF",
}
_NUM = re.compile(
    r"^[-+]?(?:0b[01_]+|0x[0-9a-fA-F_]+|0[0-7_]+|[0-9][0-9_]*(?::[0-5]?[0-9])*|"
    r"(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+|\.(?:inf|Inf|INF))$"
    r"|^\.(?:nan|NaN|NAN)$"
)
_TIMESTAMP = re.compile(
    r"^\d{4}-\d{1,2}-\d{1,2}(?:(?:[Tt]|[ \t]+)\d{1,2}:\d{2}:\d{2}(?:\.\d*)?(?:[ \t]*(?:Z|[-+]\d{1,2}(?::?\d{2})?))?)?$"
)
_FIRST_INDICATORS = set("#,[]{}&*!|>'\"%@`")


def _needs_double(s: str) -> bool:
    """True when the plain form would resolve to a non-string (go-yaml v2 ``resolve``)."""
    return s in _NULL or s in _BOOL or bool(_NUM.match(s)) or bool(_TIMESTAMP.match(s))


def _plain_allowed(s: str) -> bool:
    """Block-context plain style allowed (go-yaml v2 ``yaml_emitter_analyze_scalar``)."""
    if s[:3] in ("---", "..."):
        return False
    if s[0] == " " or s[-1] == " ":
        return False
    n = len(s)
    for i, ch in enumerate(s):
        followed_ws = i + 1 >= n or s[i + 1] in " \t"
        if i == 0:
            if ch in _FIRST_INDICATORS:
                return False
            if ch in "?:-" and followed_ws:
                return False
        else:
            if ch == ":" and followed_ws:
                return False
            if ch == "#" and s[i - 1] in " \t":
                return False
        if not (" " <= ch <= "~"):
            return False
    return True


def _fold(text: str, col: int, indent: int, single: bool) -> list[str]:
    """Write ``text`` from column ``col``, breaking at a space once past WIDTH."""
    lines: list[str] = []
    cur: list[str] = []
    spaces = False
    n = len(text)
    for i, ch in enumerate(text):
        if ch == " ":
            ok = not spaces and col > WIDTH and not (i + 1 < n and text[i + 1] == " ")
            if single:
                ok = ok and 0 < i < n - 1
            if ok:
                lines.append("".join(cur))
                cur = [" " * indent]
                col = indent
            else:
                cur.append(ch)
                col += 1
            spaces = True
        else:
            if single and ch == "'":
                cur.append("'")
                col += 1
            cur.append(ch)
            col += 1
            spaces = False
    lines.append("".join(cur))
    return lines


def scalar(value: Any, col: int, indent: int) -> list[str]:
    """A scalar starting at column ``col``; continuation lines are indented by ``indent``."""
    if value is None:
        return ["null"]
    if value is True:
        return ["true"]
    if value is False:
        return ["false"]
    if isinstance(value, int):
        return [str(value)]
    if isinstance(value, float):
        return [repr(value)]
    s = str(value)
    if _needs_double(s) or "\n" in s:
        return ['"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"']
    if _plain_allowed(s):
        return _fold(s, col, indent, single=False)
    lines = _fold(s, col + 1, indent, single=True)
    lines[0] = "'" + lines[0]
    lines[-1] += "'"
    return lines


def _key_less(a: str, b: str) -> bool:
    """go-yaml v2's key order (sorter.go ``keyList.Less``) for string keys."""
    for i in range(min(len(a), len(b))):
        if a[i] == b[i]:
            continue
        al, bl = a[i].isalpha(), b[i].isalpha()
        if al and bl:
            return a[i] < b[i]
        if al or bl:
            return bl
        an = bn = 0
        if a[i] == "0" or b[i] == "0":
            j = i - 1
            while j >= 0 and a[j].isdigit():
                if a[j] != "0":
                    an = bn = 1
                    break
                j -= 1
        ai = i
        while ai < len(a) and a[ai].isdigit():
            an = an * 10 + int(a[ai])
            ai += 1
        bi = i
        while bi < len(b) and b[bi].isdigit():
            bn = bn * 10 + int(b[bi])
            bi += 1
        if an != bn:
            return an < bn
        if ai != bi:
            return ai < bi
        return a[i] < b[i]
    return len(a) < len(b)


def _key_cmp(a: str, b: str) -> int:
    return -1 if _key_less(a, b) else (1 if _key_less(b, a) else 0)


_KEY = functools.cmp_to_key(_key_cmp)


def _mapping(obj: dict[str, Any], indent: int, out: list[str], first: str | None = None) -> None:
    pad = " " * indent
    for n, key in enumerate(sorted(obj, key=_KEY)):
        value = obj[key]
        lead = first if (n == 0 and first is not None) else pad
        if isinstance(value, dict):
            if value:
                out.append(f"{lead}{key}:")
                _mapping(value, indent + 2, out)
            else:
                out.append(f"{lead}{key}: {{}}")
        elif isinstance(value, list):
            if value:
                out.append(f"{lead}{key}:")
                _sequence(value, indent, out)
            else:
                out.append(f"{lead}{key}: []")
        else:
            text = scalar(value, indent + len(key) + 2, indent + 2)
            out.append(f"{lead}{key}: {text[0]}")
            out.extend(text[1:])


def _sequence(items: list[Any], indent: int, out: list[str]) -> None:
    pad = " " * indent
    for item in items:
        if isinstance(item, dict):
            if item:
                _mapping(item, indent + 2, out, first=pad + "- ")
            else:
                out.append(f"{pad}- {{}}")
        elif isinstance(item, list):
            raise ValueError("nested sequences are not rendered")
        else:
            text = scalar(item, indent + 2, indent + 2)
            out.append(f"{pad}- {text[0]}")
            out.extend(text[1:])


def to_yaml(obj: dict[str, Any]) -> str:
    """``kubectl get … -o yaml`` text of one object (ends with a newline)."""
    out: list[str] = []
    _mapping(obj, 0, out)
    return "\n".join(out) + "\n"


def _go_escape(text: str) -> str:
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def to_json(obj: Any) -> str:
    """``kubectl get … -o json`` text (four-space indent, sorted keys, HTML-safe escapes)."""
    return _go_escape(json.dumps(obj, indent=4, sort_keys=True, ensure_ascii=True)) + "\n"


def list_json_chunks(items: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The text of ``to_json({"apiVersion": "v1", "items": items, "kind": "List", ...})``, item by
    item, so that a long List is written without holding it."""
    first = True
    for item in items:
        body = _go_escape(json.dumps(item, indent=4, sort_keys=True, ensure_ascii=True))
        body = "\n".join("        " + ln for ln in body.split("\n"))
        yield ('{\n    "apiVersion": "v1",\n    "items": [\n' if first else ",\n") + body
        first = False
    if first:
        yield '{\n    "apiVersion": "v1",\n    "items": [],'
    else:
        yield "\n    ],"
    yield '\n    "kind": "List",\n    "metadata": {\n        "resourceVersion": ""\n    }\n}\n'
