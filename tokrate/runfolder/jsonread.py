"""Typed reads of one JSON object (a run.json section), each failure one line that
names the file and the key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from tokrate.errors import RunFolderError

__all__ = ["JsonReader"]

T = TypeVar("T")


class JsonReader:
    """Typed access to one JSON object, with one-line errors naming file and key."""

    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        self.data = data
        self.where = where
        self.used: set[str] = set()

    def _bad(self, key: str, want: str) -> RunFolderError:
        return RunFolderError(f"{self.where}: {key} must be {want}, got {self.data[key]!r}")

    def opt_str(self, key: str) -> str | None:
        self.used.add(key)
        value = self.data.get(key)
        if value is None or isinstance(value, str):
            return value
        raise self._bad(key, "a string")

    def str_(self, key: str, default: str = "") -> str:
        value = self.opt_str(key)
        return default if value is None else value

    def opt_float(self, key: str) -> float | None:
        self.used.add(key)
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._bad(key, "a number")
        return float(value)

    def opt_int(self, key: str) -> int | None:
        self.used.add(key)
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise self._bad(key, "an integer")
        return value

    def opt_bool(self, key: str) -> bool | None:
        self.used.add(key)
        value = self.data.get(key)
        if value is None or isinstance(value, bool):
            return value
        raise self._bad(key, "true or false")

    def mapping(self, key: str) -> Mapping[str, Any]:
        self.used.add(key)
        value = self.data.get(key)
        if value is None:
            return {}
        if isinstance(value, Mapping):
            return value
        raise self._bad(key, "an object")

    def opt_mapping(self, key: str) -> Mapping[str, Any] | None:
        self.used.add(key)
        return self.mapping(key) if self.data.get(key) is not None else None

    def items(self, key: str) -> list[Mapping[str, Any]]:
        self.used.add(key)
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
            raise self._bad(key, "a list of objects")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        self.used.add(key)
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(key, "a list of strings")
        return tuple(value)

    def extra(self) -> dict[str, Any]:
        return {k: v for k, v in self.data.items() if k not in self.used}
