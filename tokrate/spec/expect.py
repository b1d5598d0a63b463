"""What a right answer looks like: a prompt's ``expect`` object, checked at load, judged
after the load.

A prompt line (or a conversation turn) may carry ``"expect": {KIND: VALUE, ...}`` with
exactly one kind (docs/quality.md):

- ``{"equals": "Paris"}``: the answer, normalised (:func:`normalise`: case, surrounding
  whitespace and quotes, trailing punctuation, runs of whitespace), equals the value
  normalised.
- ``{"contains": "42 km"}``: the normalised answer contains the normalised value.
- ``{"one_of": ["billing", "technical"]}``: the normalised answer is one of them (a
  classification label).
- ``{"regex": "^A\\d+$"}``: Python ``re.search`` finds the pattern in the raw answer.
- ``{"number": 42, "tolerance": 0.5}``: the first number in the answer is within
  ``tolerance`` (default 0) of ``number``.
- ``{"json_schema": {...}}``: the answer (a Markdown code fence around it is allowed)
  parses as JSON and validates against the schema (JSON Schema, ``jsonschema``).
- ``{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}``: the answer
  called the tool ``name`` with arguments (its JSON text, parsed) that contain
  ``arguments`` (a subset: every key given, with the same JSON value, recursively; extra
  keys allowed), or, with ``"arguments_schema": {...}`` instead, arguments the JSON schema
  accepts; ``name`` alone passes on any arguments. Any one of the answer's calls may match.
- ``{"no_tool_call": true}``: the answer called no tool.
- ``{"check": "module:function"}``: the function is called as ``function(prompt,
  answer)`` (``prompt`` a dict: id, task, messages or prompt, body, turn; a function that
  takes a ``tool_calls`` argument also gets the answer's calls, ``[{"index", "name",
  "arguments"}]``) and returns a bool or a score in [0, 1]; a score passes at
  ``min_score`` (default 0.5) or above.

Every kind but ``tool_call`` (whose name and arguments are the right call) may add
``"example"``: a right answer's text, which must pass the check itself (so a mistyped
check fails at load, not after an hour of load); the simulator answers it
(docs/simulator.md). ``equals``, ``one_of``, ``contains`` and ``number`` have one by
default.

:func:`parse_expect` validates at load (a bad regex, schema, import or example is a
:class:`~tokrate.errors.PromptError` naming the file and line); :func:`judge` runs in
the analysis process after the load and turns an exception of a user check into the
check's own error, never the model's.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

from tokrate.errors import PromptError

__all__ = [
    "EXPECT_KINDS",
    "Expect",
    "Outcome",
    "judge",
    "normalise",
    "parse_expect",
]

#: The declared vocabulary, in the order docs/quality.md lists it.
EXPECT_KINDS: Final = (
    "equals",
    "contains",
    "one_of",
    "regex",
    "number",
    "json_schema",
    "tool_call",
    "no_tool_call",
    "check",
)
#: Keys of a ``tool_call`` check's value.
_TOOL_CALL_KEYS: Final = ("name", "arguments", "arguments_schema")
#: Keys an expect object may carry besides its one kind.
_MODIFIERS: Final = {"number": ("tolerance",), "check": ("min_score",)}
_COMMON: Final = ("example",)
#: A user check's default passing score.
DEFAULT_MIN_SCORE: Final = 0.5

_NUMBER: Final = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_FENCE: Final = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(.*?)\n?```\s*$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Expect:
    """One prompt's check: ``kind`` (one of EXPECT_KINDS), its ``value`` (a string, a
    list of strings, a number, a schema object or "module:function"), ``tolerance``
    (number), ``min_score`` (check) and ``example`` (a right answer, or None where
    none can be derived). ``raw`` is the object as written (run folder's checks.json).
    ``implied_by``: the body field a check nobody wrote comes from (``tool_choice``,
    ``response_format``: :func:`tokrate.inputs.request_body.implied_expect`), else None."""

    kind: str
    value: Any
    tolerance: float = 0.0
    min_score: float = DEFAULT_MIN_SCORE
    example: str | None = None
    raw: Mapping[str, Any] | None = None
    implied_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw) if self.raw is not None else {self.kind: self.value}


@dataclass(frozen=True, slots=True)
class Outcome:
    """One answer judged: ``passed`` and ``score`` (1.0/0.0 for the built-in kinds),
    or ``error`` (the check itself failed: it raised, or returned something that is
    neither a bool nor a number in [0, 1]) with both None."""

    passed: bool | None
    score: float | None
    error: str | None = None


def normalise(text: str) -> str:
    """Casefolded, whitespace runs as one space, surrounding whitespace, quotes and
    backticks stripped, trailing ``.``, ``!``, ``;``, ``:`` stripped: what a human
    grader ignores when comparing a short answer."""
    out = " ".join(text.split()).casefold()
    previous = None
    while out != previous:
        previous = out
        out = out.strip(" \"'`*").rstrip(".!;:").strip()
    return out


def _fail(where: str, what: str) -> PromptError:
    return PromptError(f"{where}: expect: {what}")


def _string(value: object, where: str, kind: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, f"'{kind}' must be a non-empty string, got {value!r}")
    return value


def _finite(value: object, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(where, f"'{key}' must be a number, got {value!r}")
    return float(value)


def _check_schema(schema: object, where: str) -> None:
    if not isinstance(schema, dict):
        raise _fail(where, f"'json_schema' must be a JSON Schema object, got {schema!r}")
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as err:
        path = "/".join(str(p) for p in err.absolute_path) or "(top)"
        raise _fail(
            where, f"'json_schema' is not a valid schema at {path}: {err.message}"
        ) from None


def _value(kind: str, value: object, where: str) -> Any:
    """``value`` checked for ``kind`` (raises PromptError)."""
    if kind in ("equals", "contains"):
        return _string(value, where, kind)
    if kind == "one_of":
        if not isinstance(value, list) or not value:
            raise _fail(where, f"'one_of' must be a non-empty list of strings, got {value!r}")
        return tuple(_string(v, where, "one_of[]") for v in value)
    if kind == "regex":
        pattern = _string(value, where, kind)
        try:
            re.compile(pattern)
        except re.error as err:
            raise _fail(where, f"'regex' {pattern!r} does not compile: {err}") from None
        return pattern
    if kind == "number":
        return _finite(value, where, kind)
    if kind == "json_schema":
        _check_schema(value, where)
        return value
    if kind == "tool_call":
        return _tool_call_value(value, where)
    if kind == "no_tool_call":
        if value is not True:
            raise _fail(where, f"'no_tool_call' must be true, got {value!r}")
        return True
    name = _string(value, where, kind)
    load_check(name, where)
    return name


def _tool_call_value(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"'tool_call' must be an object with a 'name', got {value!r}")
    unknown = sorted(k for k in value if k not in _TOOL_CALL_KEYS)
    if unknown:
        raise _fail(
            where, f"unknown key {unknown[0]!r} in 'tool_call' (use {', '.join(_TOOL_CALL_KEYS)})"
        )
    _string(value.get("name"), where, "tool_call.name")
    if "arguments" in value and "arguments_schema" in value:
        raise _fail(where, "'tool_call' takes 'arguments' or 'arguments_schema', not both")
    if "arguments" in value and not isinstance(value["arguments"], dict):
        raise _fail(where, f"'tool_call.arguments' must be an object, got {value['arguments']!r}")
    if "arguments_schema" in value:
        _check_schema(value["arguments_schema"], where)
    return value


def parse_expect(obj: object, where: str) -> Expect:
    """An ``expect`` object (module docstring) checked: one known kind, its value's
    type, a regex that compiles, a schema that is a schema, a check function that
    imports, an example that passes.

    Raises:
        PromptError: "WHERE: expect: WHAT" in one line.
    """
    if not isinstance(obj, dict):
        raise _fail(where, f'must be an object such as {{"equals": "..."}}, got {obj!r}')
    kinds = [k for k in obj if k in EXPECT_KINDS]
    if len(kinds) != 1:
        found = ", ".join(kinds) if kinds else "none"
        raise _fail(where, f"needs exactly one of {', '.join(EXPECT_KINDS)} (found {found})")
    kind = kinds[0]
    allowed = {kind, *_COMMON, *_MODIFIERS.get(kind, ())}
    unknown = sorted(k for k in obj if k not in allowed)
    if unknown:
        raise _fail(where, f"unknown key {unknown[0]!r} for a {kind!r} check")
    value = _value(kind, obj[kind], where)
    tolerance = _finite(obj.get("tolerance", 0.0), where, "tolerance")
    if tolerance < 0:
        raise _fail(where, f"'tolerance' must be >= 0, got {tolerance:g}")
    min_score = _finite(obj.get("min_score", DEFAULT_MIN_SCORE), where, "min_score")
    if not 0 <= min_score <= 1:
        raise _fail(where, f"'min_score' must be in [0, 1], got {min_score:g}")
    example = obj.get("example")
    if example is not None and kind == "tool_call":
        raise _fail(
            where,
            "a 'tool_call' check takes no 'example': its name and arguments are the right call",
        )
    if example is not None and not isinstance(example, str):
        raise _fail(where, f"'example' must be a string (the answer text), got {example!r}")
    expect = Expect(
        kind, value, tolerance, min_score, example or _default_example(kind, value), obj
    )
    if example is not None and kind != "check":
        outcome = judge(expect, example, {})
        if not outcome.passed:
            raise _fail(where, f"'example' {example!r} does not pass its own {kind!r} check")
    return expect


def _default_example(kind: str, value: Any) -> str | None:
    if kind in ("equals", "contains"):
        return str(value)
    if kind == "one_of":
        return str(value[0])
    if kind == "number":
        return f"{value:g}"
    return None


def load_check(name: str, where: str) -> Callable[..., object]:
    """The function ``module:function`` names, imported (from ``PYTHONPATH`` or the
    working directory, which is added to the path).

    Raises:
        PromptError: malformed name, module not importable, no such callable.
    """
    module, sep, attr = name.partition(":")
    if not sep or not module or not attr:
        raise _fail(where, f"'check' must be 'module:function', got {name!r}")
    try:
        return _import_check(module, attr)
    except ImportError as err:
        raise _fail(where, f"'check' {name!r}: cannot import {module!r} ({err})") from None
    except AttributeError:
        raise _fail(where, f"'check' {name!r}: {module!r} has no function {attr!r}") from None
    except Exception as err:
        raise _fail(
            where, f"'check' {name!r}: importing {module!r} raised {type(err).__name__}: {err}"
        ) from None


@cache
def _import_check(module: str, attr: str) -> Callable[..., object]:
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.append(cwd)
    found = getattr(importlib.import_module(module), attr)
    if not callable(found):
        raise AttributeError(attr)
    return found  # type: ignore[no-any-return]


def _json_answer(answer: str) -> object:
    text = answer.strip()
    fenced = _FENCE.match(text)
    return json.loads(fenced.group(1) if fenced else text)


def _first_number(answer: str) -> float | None:
    match = _NUMBER.search(answer)
    if match is None:
        return None
    try:
        return float(match.group(0).replace(",", ""))
    except ValueError:
        return None


def _subset(want: Any, got: Any) -> bool:
    """``got`` holds ``want``: objects key by key (extra keys allowed), lists item by
    item (same length), anything else the same JSON value (true is not 1)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(
            k in got and _subset(v, got[k]) for k, v in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(_subset(w, g) for w, g in zip(want, got, strict=True))
        )
    if isinstance(want, bool) or isinstance(got, bool):
        return want is got
    return bool(want == got)


def _call_matches(value: Mapping[str, Any], call: Mapping[str, Any]) -> bool:
    if call.get("name") != value["name"]:
        return False
    if "arguments" not in value and "arguments_schema" not in value:
        return True
    try:
        arguments = json.loads(str(call.get("arguments") or ""))
    except (ValueError, RecursionError):
        return False
    if "arguments" in value:
        return _subset(value["arguments"], arguments)
    import jsonschema

    schema = value["arguments_schema"]
    return bool(jsonschema.validators.validator_for(schema)(schema).is_valid(arguments))


def _builtin(expect: Expect, answer: str, tool_calls: Sequence[Mapping[str, Any]]) -> bool:
    kind, value = expect.kind, expect.value
    if kind == "tool_call":
        return any(_call_matches(value, call) for call in tool_calls)
    if kind == "no_tool_call":
        return not tool_calls
    if kind == "equals":
        return normalise(answer) == normalise(value)
    if kind == "contains":
        return normalise(value) in normalise(answer)
    if kind == "one_of":
        return normalise(answer) in {normalise(v) for v in value}
    if kind == "regex":
        return re.search(value, answer) is not None
    if kind == "number":
        found = _first_number(answer)
        return found is not None and abs(found - value) <= expect.tolerance
    import jsonschema

    try:
        document = _json_answer(answer)
    except (ValueError, RecursionError):
        return False
    return bool(jsonschema.validators.validator_for(value)(value).is_valid(document))


def _takes_tool_calls(function: Callable[..., object]) -> bool:
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "tool_calls" or p.kind is p.VAR_KEYWORD for p in params)


def judge(
    expect: Expect,
    answer: str,
    prompt: Mapping[str, Any],
    tool_calls: Sequence[Mapping[str, Any]] = (),
) -> Outcome:
    """``answer`` (its text) and ``tool_calls`` (its calls, ``{"index", "name",
    "arguments"}`` each) judged by ``expect``. A user check gets ``(prompt, answer)``,
    and ``tool_calls=`` when it takes it; what it raises or a result that is not a bool
    or a number in [0, 1] becomes ``error``."""
    if expect.kind != "check":
        passed = _builtin(expect, answer, tool_calls)
        return Outcome(passed, 1.0 if passed else 0.0)
    try:
        function = _import_check(*expect.value.split(":", 1))
        if _takes_tool_calls(function):
            calls = [dict(c) for c in tool_calls]
            result = function(dict(prompt), answer, tool_calls=calls)
        else:
            result = function(dict(prompt), answer)
    except Exception as err:
        return Outcome(None, None, f"{expect.value} raised {type(err).__name__}: {err}"[:300])
    if isinstance(result, bool):
        return Outcome(result, 1.0 if result else 0.0)
    if isinstance(result, int | float) and 0 <= result <= 1:
        score = float(result)
        return Outcome(score >= expect.min_score, score)
    return Outcome(
        None, None, f"{expect.value} returned {result!r}: want a bool or a number in [0, 1]"[:300]
    )
