"""The public API is one sorted __all__ whose every name resolves."""

from __future__ import annotations

import tokrate


def test_all_is_sorted_and_resolves() -> None:
    assert list(tokrate.__all__) == sorted(tokrate.__all__)
    for name in tokrate.__all__:
        assert hasattr(tokrate, name), name


def test_version_matches_package_metadata() -> None:
    from importlib.metadata import version

    assert tokrate.__version__ == version("tokrate")


def test_all_is_complete() -> None:
    """Every public name the package module binds (eagerly or lazily) is in __all__."""
    import types

    bound = {
        name
        for name, value in vars(tokrate).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    bound -= {"annotations", "importlib", "TYPE_CHECKING", "Any"}
    bound |= set(tokrate._LAZY)
    assert bound - set(tokrate.__all__) == set()


def test_every_type_a_run_spec_is_built_from_is_exported() -> None:
    """A Python user builds a RunSpec from tokrate's names alone."""
    import dataclasses
    import typing

    seen: set[type] = set()

    def walk(cls: type) -> None:
        if cls in seen:
            return
        seen.add(cls)
        for hint in typing.get_type_hints(cls).values():
            for arg in (hint, *typing.get_args(hint), *_nested_args(hint)):
                if isinstance(arg, type) and dataclasses.is_dataclass(arg):
                    walk(arg)

    def _nested_args(hint: object) -> list[object]:
        out: list[object] = []
        for a in typing.get_args(hint):
            out += [a, *_nested_args(a)]
        return out

    walk(tokrate.RunSpec)
    missing = {c.__name__ for c in seen} - set(tokrate.__all__)
    assert len(seen) > 10
    assert missing == set()
