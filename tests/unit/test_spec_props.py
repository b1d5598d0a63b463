"""Property tests: any TOML, any wrong type, any override gives a RunSpec or one
ConfigError line that names the key (or the TOML/encoding problem), never another
exception."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokrate.errors import ConfigError
from tokrate.spec.config_file import load_spec
from tokrate.spec.types import (
    ClientSpec,
    DistributedSpec,
    EndpointSpec,
    LoadSpec,
    ModelSpec,
    OutputSpec,
    PromptsSpec,
    RunSpec,
    SimulatorSpec,
    SloSpec,
)

SECTIONS = {
    "load": LoadSpec,
    "prompts": PromptsSpec,
    "slo": SloSpec,
    "output": OutputSpec,
    "client": ClientSpec,
    "simulator": SimulatorSpec,
    "distributed": DistributedSpec,
    "endpoint": EndpointSpec,
    "model": ModelSpec,
}
FIELD_NAMES = sorted({f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls)})
WORDS = ["chat", "poisson", "gamma", "open", "closed", "parallel", "fast", "a100-80g", "x", ""]

scalars = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from(WORDS),
    st.text(max_size=8),
    st.dates(min_value=dt.date(1, 1, 1)),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from([*FIELD_NAMES, "zz"]), inner, max_size=4),
    ),
    max_leaves=12,
)
tables = st.dictionaries(st.sampled_from([*FIELD_NAMES, "bogus"]), values, max_size=6)
documents = st.dictionaries(
    st.sampled_from([*SECTIONS, "baseline", "nope"]),
    st.one_of(tables, st.lists(tables, max_size=3), values),
    max_size=5,
)


def toml_value(v: Any) -> str:
    """A TOML literal for ``v`` (inline tables and arrays; TOML 1.0 mixed arrays)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        # JSON escapes every control character but DEL, which TOML also forbids raw.
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    assert isinstance(v, dict)
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def check(path: Path | None, overrides: dict[str, Any] | None = None) -> None:
    try:
        spec = load_spec(path, overrides or {})
    except ConfigError as err:
        message = str(err)
        assert "\n" not in message and "\r" not in message
        assert "key '" in message or "invalid TOML" in message or "not valid UTF-8" in message, (
            message
        )
    else:
        assert isinstance(spec, RunSpec)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spec-props")


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_any_structured_document(folder: Path, doc: dict[str, Any]) -> None:
    text = "\n".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in doc.items())
    path = folder / "doc.toml"
    path.write_text(text, encoding="utf-8")
    check(path)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes(folder: Path, data: bytes) -> None:
    path = folder / "bytes.toml"
    path.write_bytes(data)
    check(path)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.builds(
            lambda a, b: f"{a}.{b}",
            st.sampled_from([*SECTIONS, "endpoints", "models", "nope"]),
            st.sampled_from([*FIELD_NAMES, "bogus"]),
        ),
        values,
        max_size=4,
    )
)
def test_any_overrides(overrides: dict[str, Any]) -> None:
    check(None, overrides)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(list(SECTIONS)), st.sampled_from(FIELD_NAMES), values)
def test_one_wrong_value_names_its_key(folder: Path, section: str, name: str, value: Any) -> None:
    """A single key set to anything: accepted, or an error naming exactly that key."""
    if section in ("endpoint", "model"):
        base = (
            {"name": "m", "base_url": "http://127.0.0.1:1/v1"}
            if section == "endpoint"
            else {"name": "m"}
        )
        base.pop(name, None)  # the value under test replaces the base value
        text = f"[[{section}]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in base.items())
        key = f"{section}[0].{name}"
    else:
        text = f"[{section}]\n"
        key = f"{section}.{name}"
    text += f"{json.dumps(name)} = {toml_value(value)}\n"
    path = folder / "one.toml"
    path.write_text(text, encoding="utf-8")
    try:
        load_spec(path, {})
    except ConfigError as err:
        message = str(err)
        assert "\n" not in message
        # The key named is the one set, a sub-key of it, or a rule it broke.
        assert "key '" in message, message
        if "unknown key" not in message and section not in ("load", "model"):
            assert key in message or f"{section}." in message, message
