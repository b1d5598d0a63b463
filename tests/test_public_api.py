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
