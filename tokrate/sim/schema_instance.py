"""A small JSON value that a JSON schema accepts: what the simulator answers when asked
for structured output or a tool's arguments without being told the right answer.

:func:`instance` walks the schema: ``const`` and the first ``enum`` value win; an object
gets every declared property (its required ones at least); a string the first of its
``enum``, a date/time/email/uri/uuid for those formats, else ``"text"`` padded or cut to
``minLength``/``maxLength``; a number its ``minimum`` (or ``exclusiveMinimum`` + 1, or
0, capped by ``maximum``); an array ``minItems`` (at least one) of its ``items``;
``anyOf``/``oneOf`` their first branch, ``allOf`` its branches merged; local ``$ref``
(``#/$defs/...``, ``#/definitions/...``) followed, at most :data:`MAX_DEPTH` deep.
Deterministic; for the schemas real prompts use (tool parameters, extraction records),
not every corner of JSON Schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["MAX_DEPTH", "instance"]

#: Deepest nesting followed (a recursive ``$ref`` stops here with null).
MAX_DEPTH: Final = 12
_FORMATS: Final = {
    "date": "2024-05-17",
    "date-time": "2024-05-17T09:30:00Z",
    "time": "09:30:00",
    "email": "ada@example.com",
    "uri": "https://example.com",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
}


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for part in ref[2:].split("/"):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def _type(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return str(kinds[0]) if kinds else "null"
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def _string(schema: Mapping[str, Any]) -> str:
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS:
        return _FORMATS[fmt]
    low = schema.get("minLength")
    high = schema.get("maxLength")
    text = "text"
    if isinstance(low, int) and len(text) < low:
        text = text + "x" * (low - len(text))
    if isinstance(high, int) and len(text) > high:
        text = text[:high]
    return text


def _number(schema: Mapping[str, Any], integer: bool) -> int | float:
    low = schema.get("minimum")
    if low is None and isinstance(schema.get("exclusiveMinimum"), int | float):
        low = schema["exclusiveMinimum"] + 1
    value = low if isinstance(low, int | float) else 0
    high = schema.get("maximum")
    if isinstance(high, int | float) and value > high:
        value = high
    return int(value) if integer else value


def instance(schema: object, root: object = None, depth: int = 0) -> Any:
    """A value ``schema`` accepts (see the module doc); ``root`` resolves ``$ref``
    (defaults to ``schema`` itself)."""
    if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
        return None
    top = root if isinstance(root, Mapping) else schema
    schema = _resolve(schema, top)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            return instance(branches[0], top, depth + 1)
    branches = schema.get("allOf")
    if isinstance(branches, list) and branches:
        merged: dict[str, Any] = {}
        for branch in branches:
            if isinstance(branch, Mapping):
                merged.update(_resolve(branch, top))
        return instance(merged, top, depth + 1)
    kind = _type(schema)
    if kind == "object":
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        return {name: instance(sub, top, depth + 1) for name, sub in props.items()}
    if kind == "array":
        count = schema.get("minItems")
        count = count if isinstance(count, int) and count > 0 else 1
        return [instance(schema.get("items"), top, depth + 1) for _ in range(count)]
    if kind == "string":
        return _string(schema)
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    if kind == "boolean":
        return True
    return None
