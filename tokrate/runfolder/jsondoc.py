"""The one path between a run-folder JSON document and its frozen dataclass.

:func:`to_json` writes a dataclass as the JSON object its file holds and
:func:`from_json` builds the dataclass back, both driven by the dataclass's own type
hints (the way ``tokrate.spec._convert`` builds the spec from TOML), so a key is
spelled, typed and defaulted once: on its field. Adding a key to a document is one
field line.

The mapping, field type -> JSON:

- ``str``, ``int``, ``float``, ``bool``, ``Literal[...]``: the JSON scalar (an integer
  is read as a float where a float is wanted; an integral float as an int);
- ``X | None``: the value or null;
- ``tuple[X, ...]``: an array; ``tuple[tuple[str, V], ...]``: an object kept as ordered
  (key, value) pairs; ``tuple[A, B]``: an array of exactly those;
- ``Mapping[str, V]`` / ``dict[str, V]``: an object;
- a dataclass or a NamedTuple: an object, its fields in declaration order; ``Any``:
  kept as read.

Old layouts are read through declared defaults, never hand code: a key missing (or
null where its type has no null) takes its field's default; ``metadata=DEFAULT_FROM(
"other")`` takes another field's value instead; ``metadata=OMIT_IF_NONE`` /
``OMIT_IF_EMPTY`` leaves a key out of the file while it says nothing (keys added later
that older files lack); ``metadata=EXTRA`` marks the field that keeps a newer
tokrate's unknown keys and writes them back unchanged (``EXTRA_INSIDE``: under its own
key; elsewhere unknown keys are ignored). A class may also write what it derives:
``metadata=FLATTEN`` writes a dataclass field's keys among its parent's.
``__json_computed__ = {"passed": ("rate",)}`` writes property ``rate`` right after
field ``passed`` (for readers of the file; never read back). Every failure is one
:class:`~tokrate.errors.RunFolderError` line naming the file, the place in it and the
key: ``run.json: targets[0]: gpus must be an integer, got 'x'``; a type that refuses
the values read (its ``__post_init__`` raises ValueError or a TokrateError) fails the
same way, with its own words.
"""

from __future__ import annotations

import dataclasses
import operator
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from tokrate.errors import RunFolderError, TokrateError

__all__ = [
    "DEFAULT_FROM",
    "EXTRA",
    "EXTRA_INSIDE",
    "FLATTEN",
    "OMIT_IF_EMPTY",
    "OMIT_IF_NONE",
    "from_json",
    "to_json",
]

T = TypeVar("T")

_OMIT: Final = "tokrate.json.omit"
_EXTRA: Final = "tokrate.json.extra"
_DEFAULT_FROM: Final = "tokrate.json.default_from"

#: Field metadata: the key is left out of the file while the field is None.
OMIT_IF_NONE: Final[Mapping[str, Any]] = {_OMIT: "none"}
#: Field metadata: the key is left out of the file while the field is empty (or None).
OMIT_IF_EMPTY: Final[Mapping[str, Any]] = {_OMIT: "empty"}
#: Field metadata: this Mapping field holds the document's keys no field names (read
#: from a newer file), written back after the known ones.
EXTRA: Final[Mapping[str, Any]] = {_EXTRA: True}
#: Field metadata: this dataclass field's keys are written in its place, among its
#: parent's, and read back from them.
FLATTEN: Final[Mapping[str, Any]] = {_OMIT: "flatten"}
#: Field metadata: this Mapping field is written under its own key, and reading also
#: puts there the document's keys no field names (a record's ``extra``).
EXTRA_INSIDE: Final[Mapping[str, Any]] = {_EXTRA: "inside"}


def DEFAULT_FROM(name: str) -> Mapping[str, Any]:
    """Field metadata: a key missing or null takes field ``name``'s value (an older
    layout that had only that one)."""
    return {_DEFAULT_FROM: name}


# --- writing --------------------------------------------------------------------------


def to_json(obj: Any) -> dict[str, Any]:
    """The JSON object of dataclass instance ``obj`` (keys in field order; containers
    as lists and dicts, ready for orjson).

    Driven by a plan made once per class (:func:`_plan`): which fields a value needs
    converting for, by a function chosen once from the field's type, so a record
    written per request in the measuring process costs about a dict of its fields."""
    plan = _PLANS.get(type(obj)) or _plan(type(obj))
    if plan.plain:
        out = dict(zip(plan.names, plan.values(obj), strict=True))
        for name, write in plan.convert:
            value = out[name]
            if value is not None:
                out[name] = write(value)
        return out
    out = {}
    extra: Mapping[str, Any] = {}
    for name, convert, omit, computed in plan.steps:
        value = getattr(obj, name)
        if omit == "extra":
            extra = value
            continue
        if omit == "flatten":
            out.update(to_json(value))
            continue
        if not (value is None and omit is not None) and not (omit == "empty" and not value):
            out[name] = value if convert is None or value is None else convert(value)
        for derived in computed:
            out[derived] = _write(getattr(obj, derived), Any)
    out.update(extra)
    return out


_Writer = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    """How to write one class: ``plain`` (no key left out, computed or flattened) is a
    dict of ``names`` and ``values`` with ``convert`` applied to the fields that need
    it; otherwise ``steps`` (name, writer, omit mode or "extra", computed keys after)."""

    plain: bool
    names: tuple[str, ...]
    values: Callable[[Any], tuple[Any, ...]]
    convert: tuple[tuple[str, _Writer], ...]
    steps: tuple[tuple[str, _Writer | None, str | None, tuple[str, ...]], ...]


_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    computed: Mapping[str, tuple[str, ...]] = getattr(cls, "__json_computed__", {})
    steps = []
    for f, hint in _fields(cls):
        omit = "extra" if f.metadata.get(_EXTRA) is True else f.metadata.get(_OMIT)
        steps.append((f.name, _writer(hint), omit, tuple(computed.get(f.name, ()))))
    names = tuple(name for name, *_ in steps)
    plan = _Plan(
        plain=len(names) > 1 and not computed and all(omit is None for *_, omit, _ in steps),
        names=names,
        values=operator.attrgetter(*names) if len(names) > 1 else tuple,
        convert=tuple((name, write) for name, write, _, _ in steps if write is not None),
        steps=tuple(steps),
    )
    _PLANS[cls] = plan
    return plan


def _writer(hint: Any) -> _Writer | None:
    """The function that writes a non-None value of type ``hint`` (None: as it is)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint in (str, int, float, bool) or origin is typing.Literal:
        return None
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _writer(inner[0])
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return to_json
    elif origin is tuple and not _is_pairs(hint):
        items = [_writer(a) for a in args if a is not Ellipsis]
        if all(w is None for w in items):
            return list
        item = items[0]
        if len(args) == 2 and args[1] is Ellipsis and item is not None:
            return lambda value: [None if v is None else item(v) for v in value]
    elif origin in (Mapping, dict, typing.Mapping) and args:
        if args[1] is Any:
            return lambda value: {k: _write_any(v) for k, v in value.items()}
        if _writer(args[1]) is None:
            return dict
    return lambda value: _write(value, hint)


_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def _write_any(value: Any) -> Any:
    """:func:`_write` of a value typed ``Any``, a JSON scalar at once."""
    return value if type(value) in _SCALARS else _write(value, Any)


def _write(value: Any, hint: Any) -> Any:
    if value is None:
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(value)
    if _is_named_tuple(type(value)):
        hints = typing.get_type_hints(type(value))
        return {name: _write(v, hints[name]) for name, v in zip(value._fields, value, strict=True)}
    if hint is Any:
        return list(value) if isinstance(value, tuple) else value
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _write(value, inner[0]) if len(inner) == 1 else value
    if origin is tuple:
        if _is_pairs(hint):
            value_hint = typing.get_args(args[0])[1]
            return {k: _write(v, value_hint) for k, v in value}
        if len(args) == 2 and args[1] is Ellipsis:
            return [_write(v, args[0]) for v in value]
        return [_write(v, h) for v, h in zip(value, args, strict=True)]
    if origin in (Mapping, dict, typing.Mapping):
        value_hint = args[1] if args else Any
        return {k: _write(v, value_hint) for k, v in value.items()}
    return value


# --- reading --------------------------------------------------------------------------


def from_json(cls: type[T], data: Any, where: str) -> T:
    """Build dataclass ``cls`` from the JSON object ``data`` found at ``where`` (the
    file, and the place in it: ``"run.json: targets[0]"``). Raises RunFolderError."""
    if not isinstance(data, Mapping):
        raise RunFolderError(f"{where}: must be an object, got {_show(data)}")
    kwargs: dict[str, Any] = {}
    derived: list[tuple[str, str]] = []
    extra_field: str | None = None
    known: set[str] = {n for names in getattr(cls, "__json_computed__", {}).values() for n in names}
    inside = False
    for f, hint in _fields(cls):
        known.add(f.name)
        if f.metadata.get(_EXTRA):
            extra_field = f.name
            inside = f.metadata[_EXTRA] == "inside"
            if not (inside and f.name in data):
                continue
        if f.metadata.get(_OMIT) == "flatten":
            kwargs[f.name] = from_json(hint, data, where)
            known.update(g.name for g, _ in _fields(hint))
            known.update(
                n for names in getattr(hint, "__json_computed__", {}).values() for n in names
            )
            continue
        raw = data.get(f.name)
        source = f.metadata.get(_DEFAULT_FROM)
        if raw is None and source is not None:
            derived.append((f.name, source))
            continue
        if raw is None and not (f.name in data and _allows_none(hint)):
            if _has_default(f):
                continue
            if _allows_none(hint):
                kwargs[f.name] = None
                continue
            raise RunFolderError(f"{where}: {f.name} is missing")
        kwargs[f.name] = _read(raw, hint, where, f.name)
    for name, source in derived:
        kwargs[name] = kwargs.get(source)
    if extra_field is not None:
        unknown = {k: v for k, v in data.items() if k not in known}
        if inside and (unknown or extra_field not in kwargs):
            kwargs[extra_field] = {**kwargs.get(extra_field, {}), **unknown}
        elif not inside:
            kwargs[extra_field] = unknown
    try:
        return cls(**kwargs)
    except (ValueError, TokrateError) as err:
        raise RunFolderError(f"{where}: {err}") from None


def _named_from_json(cls: type[T], data: Any, where: str) -> T:
    """NamedTuple ``cls`` from the JSON object ``data`` (every field is required)."""
    if not isinstance(data, Mapping):
        raise RunFolderError(f"{where}: must be an object, got {_show(data)}")
    values = []
    for name, hint in typing.get_type_hints(cls).items():
        raw = data.get(name)
        if raw is None and not _allows_none(hint):
            raise RunFolderError(f"{where}: {name} is missing")
        values.append(_read(raw, hint, where, name))
    return cls(*values)


def _read(value: Any, hint: Any, where: str, key: str) -> Any:
    """``value`` (not None unless ``hint`` allows it) as a ``hint``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported union {hint!r}")  # pragma: no cover - a type's bug
        return _read(value, inner[0], where, key)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise _bad(where, key, "an object", value)
        return from_json(hint, value, f"{where}: {key}")
    if _is_named_tuple(hint):
        return _named_from_json(hint, value, f"{where}: {key}")
    if origin is tuple:
        if _is_pairs(hint):
            if not isinstance(value, Mapping):
                raise _bad(where, key, "an object", value)
            value_hint = typing.get_args(args[0])[1]
            return tuple(
                (str(k), _item(v, value_hint, where, key, "an object of", value))
                for k, v in value.items()
            )
        if not isinstance(value, list):
            raise _bad(where, key, f"a list of {_words(args[0], plural=True)}", value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(
                _item(v, args[0], where, f"{key}[{i}]", "a list of", value, list_key=key)
                for i, v in enumerate(value)
            )
        if len(value) != len(args):
            raise _bad(where, key, f"a list of {len(args)} values", value)
        return tuple(
            _item(v, h, where, f"{key}[{i}]", "a list of", value, list_key=key)
            for i, (v, h) in enumerate(zip(value, args, strict=True))
        )
    if origin in (Mapping, dict, typing.Mapping):
        if not isinstance(value, Mapping):
            raise _bad(where, key, "an object", value)
        value_hint = args[1] if args else Any
        return {
            str(k): _item(v, value_hint, where, key, "an object of", value)
            for k, v in value.items()
        }
    return _scalar(value, hint, where, key)


def _item(
    value: Any,
    hint: Any,
    where: str,
    key: str,
    container: str,
    whole: Any,
    *,
    list_key: str | None = None,
) -> Any:
    """One element of a list or object: a dataclass element is placed by its index in
    errors (``targets[0]: gpus ...``), a scalar one fails as its whole container."""
    if (isinstance(hint, type) and dataclasses.is_dataclass(hint)) or _is_named_tuple(hint):
        if not isinstance(value, Mapping):
            raise _bad(where, list_key or key, f"{container} objects", whole)
        return _read(value, hint, where, key)
    if value is None and not _allows_none(hint):
        raise _bad(where, list_key or key, f"{container} {_words(hint, plural=True)}", whole)
    try:
        return _read(value, hint, where, key)
    except RunFolderError:
        if hint is Any or (typing.get_origin(hint) is not None and not _is_scalar(hint)):
            raise
        raise _bad(
            where, list_key or key, f"{container} {_words(hint, plural=True)}", whole
        ) from None


def _scalar(value: Any, hint: Any, where: str, key: str) -> Any:
    if hint is Any or hint is object:
        return value
    if typing.get_origin(hint) is typing.Literal:
        if value in typing.get_args(hint):
            return value
        raise _bad(where, key, _words(hint), value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _bad(where, key, "true or false", value)
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise _bad(where, key, "an integer", value)
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise _bad(where, key, "a number", value)
    if hint is str:
        if isinstance(value, str):
            return value
        raise _bad(where, key, "a string", value)
    raise TypeError(f"unsupported field type {hint!r}")  # pragma: no cover - a type's bug


# --- the types' shapes ---------------------------------------------------------------

_FIELDS: dict[type, tuple[tuple[dataclasses.Field[Any], Any], ...]] = {}


def _fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], Any], ...]:
    """``cls``'s init fields with their resolved type hints (cached per class)."""
    cached = _FIELDS.get(cls)
    if cached is None:
        hints = typing.get_type_hints(cls)
        cached = tuple((f, hints[f.name]) for f in dataclasses.fields(cls) if f.init)
        _FIELDS[cls] = cached
    return cached


def _is_named_tuple(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields")


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _allows_none(hint: Any) -> bool:
    return hint is Any or (
        typing.get_origin(hint) in (typing.Union, types.UnionType)
        and type(None) in typing.get_args(hint)
    )


def _is_pairs(hint: Any) -> bool:
    """``tuple[tuple[str, V], ...]``: an object kept as ordered pairs."""
    args = typing.get_args(hint)
    if len(args) != 2 or args[1] is not Ellipsis or typing.get_origin(args[0]) is not tuple:
        return False
    inner = typing.get_args(args[0])
    return len(inner) == 2 and inner[0] is str and inner[1] is not Ellipsis


def _is_scalar(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Literal, typing.Union, types.UnionType)


def _words(hint: Any, *, plural: bool = False) -> str:
    """Human words for a type (``a number``; plural ``numbers``)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        text = " or ".join(_words(a, plural=plural) for a in inner)
        return f"{text} or null" if not plural else f"{text} or nulls"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if (isinstance(hint, type) and dataclasses.is_dataclass(hint)) or _is_named_tuple(hint):
        return "objects" if plural else "an object"
    singular, many = {
        bool: ("true or false", "booleans"),
        int: ("an integer", "integers"),
        float: ("a number", "numbers"),
        str: ("a string", "strings"),
    }.get(hint, ("a value", "values"))
    return many if plural else singular


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _bad(where: str, key: str, want: str, value: Any) -> RunFolderError:
    return RunFolderError(f"{where}: {key} must be {want}, got {_show(value)}")
