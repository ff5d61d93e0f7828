"""Reading Kubernetes JSON/YAML documents with the line span of every mapping.

Evidence must point at a line, so both readers record, for each decoded
mapping, the 1-based first and last line it occupies under the key ``LINES``.

* JSON: one value, or a stream of concatenated values (``kubectl get -w -o
  json`` prints pretty objects back to back; the API's watch prints one
  ``{"type": "ADDED", "object": ...}`` per line). Decoded with the standard
  library's pure-Python scanner so that object starts can be observed.
* YAML: one or more ``---``-separated documents, composed to nodes (which carry
  marks) and converted by hand; timestamps stay strings.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator
from json.decoder import JSONObject  # type: ignore[attr-defined]
from json.scanner import py_make_scanner  # type: ignore[attr-defined]
from typing import Any

import yaml

LINES = "\x00lines"  # key holding (first_line, last_line); cannot collide with a JSON/YAML key from the API

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def looks_json(text: str) -> bool:
    return text.lstrip()[:1] in ("{", "[")


def _json_values(text: str) -> Iterator[Any]:
    starts = [m.start() for m in re.finditer("\n", text)]

    def line_of(pos: int) -> int:
        return bisect.bisect_left(starts, pos) + 1

    decoder = json.JSONDecoder(parse_int=_json_int)

    # Same signature as json.decoder.JSONObject, which py_make_scanner calls for every '{'.
    def parse_object(
        s_and_end: tuple[str, int],
        strict: bool,
        scan_once: Any,
        object_hook: Any,
        object_pairs_hook: Any,
        memo: Any = None,
    ) -> tuple[Any, int]:
        s, end = s_and_end
        obj, new_end = JSONObject(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo)
        if isinstance(obj, dict):
            obj[LINES] = (line_of(end - 1), line_of(new_end - 1))
        return obj, new_end

    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.scan_once = py_make_scanner(decoder)  # type: ignore[attr-defined]
    pos, n = 0, len(text)
    space = re.compile(r"[\s,]*")
    while True:
        pos = space.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= n:
            return
        try:
            value, pos = decoder.raw_decode(text, pos)
        except ValueError:  # a JSONDecodeError, or a value no field holds
            # Skip a broken line (a truncated watch stream) and go on with the next one.
            nxt = text.find("\n", pos)
            if nxt < 0:
                return
            pos = nxt + 1
            continue
        yield value


def _json_int(digits: str) -> int | None:
    """A JSON integer; null past 40 digits (no field counts that high, and int() refuses 4,300)."""
    return int(digits) if len(digits) <= 40 else None


_SCALARS = {
    "tag:yaml.org,2002:int": int,
    "tag:yaml.org,2002:float": float,
}


def _convert(node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for k, v in node.value:
            out[_convert(k)] = _convert(v)
        out[LINES] = (node.start_mark.line + 1, _last_line(node))
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(v) for v in node.value]
    tag, value = node.tag, node.value
    if tag == "tag:yaml.org,2002:null":
        return None
    if tag == "tag:yaml.org,2002:bool":
        return value.lower() in ("true", "yes", "on", "y")
    if tag in _SCALARS:
        try:
            return _SCALARS[tag](value.replace("_", ""))
        except ValueError:
            return value
    return value


def _last_line(node: yaml.Node) -> int:
    """1-based last line a node occupies.

    A block collection's end mark sits on the next token, so its last line is
    the last line of its last child; flow collections and plain or quoted
    scalars end right after their final character.
    """
    if isinstance(node, yaml.ScalarNode):
        if node.style in ("|", ">"):
            return max(node.end_mark.line, node.start_mark.line + 1)
        return node.end_mark.line + 1
    if node.flow_style or not node.value:
        return node.end_mark.line + 1
    last = node.value[-1]
    return _last_line(last[1] if isinstance(node, yaml.MappingNode) else last)


def _yaml_values(text: str) -> Iterator[Any]:
    try:
        for node in yaml.compose_all(text, Loader=_Loader):
            if node is not None:
                yield _convert(node)
    except yaml.YAMLError:
        # A capture cut short (or a stray non-YAML line) ends the stream; keep what came before.
        return


def load_values(text: str) -> Iterator[Any]:
    """Every top-level value of a JSON/YAML document or stream."""
    return _json_values(text) if looks_json(text) else _yaml_values(text)


def iter_objects(value: Any, default_kind: str | None = None) -> Iterator[dict[str, Any]]:
    """Kubernetes objects inside a value: Lists, watch envelopes and bare objects."""
    if isinstance(value, list):
        for v in value:
            yield from iter_objects(v, default_kind)
        return
    if not isinstance(value, dict):
        return
    if "object" in value and value.get("type") in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"):
        yield from iter_objects(value["object"], default_kind)
        return
    kind = value.get("kind") or default_kind
    items = value.get("items")
    if isinstance(items, list) and (kind is None or str(kind).endswith("List")):
        # Raw API lists ('EventList') omit kind on their items.
        item_kind = str(kind)[: -len("List")] if kind and kind != "List" else None
        for item in items:
            yield from iter_objects(item, item_kind)
        return
    if kind and "kind" not in value:
        value = {**value, "kind": kind}
    yield value
