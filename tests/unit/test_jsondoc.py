"""The one run-folder JSON converter (tokrate.runfolder.jsondoc): the type hints decide
the JSON, declared defaults read old layouts, and a bad value is one line naming the
file, the place in it and the key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple

import orjson
import pytest

from tokrate.errors import RunFolderError
from tokrate.runfolder.jsondoc import (
    DEFAULT_FROM,
    EXTRA,
    EXTRA_INSIDE,
    FLATTEN,
    OMIT_IF_EMPTY,
    OMIT_IF_NONE,
    from_json,
    to_json,
)
from tokrate.runfolder.run_info import RunInfo, TargetInfo, run_info_from_json
from tokrate.runfolder.summary import Distribution, Group, GroupCounts, Summary


@dataclass(frozen=True, slots=True)
class Part:
    name: str
    size: float | None = None


@dataclass(frozen=True, slots=True)
class Doc:
    kind: Literal["a", "b"]
    count: int = 0
    parts: tuple[Part, ...] = ()
    pairs: tuple[tuple[str, int], ...] = ()
    span: tuple[float, float] | None = None
    table: Mapping[str, float | None] = field(default_factory=dict)
    total: float | None = None
    shown: float | None = field(default=None, metadata=DEFAULT_FROM("total"))
    later: str | None = field(default=None, metadata=OMIT_IF_NONE)
    tags: tuple[str, ...] = field(default=(), metadata=OMIT_IF_EMPTY)
    rest: Mapping[str, Any] = field(default_factory=dict, metadata=EXTRA)
    __json_computed__: ClassVar = {"count": ("double",)}

    @property
    def double(self) -> int:
        return 2 * self.count


def test_a_document_round_trips_in_field_order() -> None:
    doc = Doc(
        "a",
        3,
        (Part("x", 1.5), Part("y")),
        (("q", 1), ("r", 2)),
        (0.25, 0.75),
        {"p50": 0.5, "p99": None},
        total=2.0,
        shown=2.0,
        later="new",
        tags=("t",),
        rest={"future": [1, 2]},
    )
    data = to_json(doc)
    assert list(data) == [
        "kind",
        "count",
        "double",
        "parts",
        "pairs",
        "span",
        "table",
        "total",
        "shown",
        "later",
        "tags",
        "future",
    ]
    assert data["pairs"] == {"q": 1, "r": 2} and data["span"] == [0.25, 0.75]
    assert data["double"] == 6 and data["future"] == [1, 2]
    assert from_json(Doc, orjson.loads(orjson.dumps(data)), "doc.json") == doc


def test_old_layouts_load_as_the_declared_defaults() -> None:
    """A key an older file lacks (or holds null where its type has none) is its field's
    default; DEFAULT_FROM takes another key's value; keys left out while empty stay out."""
    old = from_json(Doc, {"kind": "b", "count": None, "total": 4}, "old.json")
    assert old == Doc("b", total=4.0, shown=4.0)
    assert "later" not in to_json(old) and "tags" not in to_json(old)
    assert isinstance(old.total, float)  # an int where a number is wanted reads as float


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "c"}, "doc.json: kind must be one of 'a', 'b', got 'c'"),
        ({"kind": "a", "count": "3"}, "doc.json: count must be an integer, got '3'"),
        ({"kind": "a", "count": 1.5}, "doc.json: count must be an integer, got 1.5"),
        ({"kind": "a", "parts": {}}, "doc.json: parts must be a list of objects, got {}"),
        (
            {"kind": "a", "parts": [{"name": "x", "size": "big"}]},
            "doc.json: parts[0]: size must be a number, got 'big'",
        ),
        ({"kind": "a", "parts": [{}]}, "doc.json: parts[0]: name is missing"),
        ({"kind": "a", "pairs": {"q": True}}, "doc.json: pairs must be an object of integers"),
        ({"kind": "a", "span": [1.0]}, "doc.json: span must be a list of 2 values, got [1.0]"),
        ({"kind": "a", "table": {"p50": "x"}}, "doc.json: table must be an object of numbers"),
        ({}, "doc.json: kind is missing"),
    ],
)
def test_a_bad_value_is_one_line_naming_file_and_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(RunFolderError) as err:
        from_json(Doc, data, "doc.json")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


class Where(NamedTuple):
    endpoint: str
    level: int


@dataclass(frozen=True, slots=True)
class Checked:
    groups: tuple[Where, ...] = ()
    share: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.share <= 1:
            raise ValueError(f"share must be in [0, 1], got {self.share}")


def test_a_named_tuple_is_an_object_and_a_refusing_type_one_line() -> None:
    """A NamedTuple is written as an object of its fields and read back as itself (a
    tuple to its users); a type whose __post_init__ refuses the values read fails as
    one line naming the file, with the type's own words."""
    doc = Checked((Where("ep", 2),), 0.5)
    data = to_json(doc)
    assert data == {"groups": [{"endpoint": "ep", "level": 2}], "share": 0.5}
    back = from_json(Checked, data, "c.json")
    assert back == doc and back.groups[0] == ("ep", 2)
    with pytest.raises(RunFolderError, match=r"^c\.json: groups\[0\]: level must be an integer"):
        from_json(Checked, {"groups": [{"endpoint": "ep", "level": "x"}]}, "c.json")
    with pytest.raises(RunFolderError, match=r"^c\.json: groups\[0\]: level is missing"):
        from_json(Checked, {"groups": [{"endpoint": "ep"}]}, "c.json")
    with pytest.raises(RunFolderError, match=r"^c\.json: share must be in \[0, 1\], got 2\.0$"):
        from_json(Checked, {"share": 2}, "c.json")


@dataclass(frozen=True, slots=True)
class Measure:
    value: float
    unit: str = "s"


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    measure: Measure = field(metadata=FLATTEN)
    extra: dict[str, Any] = field(default_factory=dict, metadata=EXTRA_INSIDE)


def test_flatten_writes_a_part_among_its_parents_keys_and_extra_inside_keeps_new_keys() -> None:
    """FLATTEN: a nested dataclass's keys sit among its parent's (routing.json's
    candidates carry their task's quality so). EXTRA_INSIDE: a field of its own in the
    file that also receives keys no field names (a newer record's)."""
    row = Row("r", Measure(2.0), {"note": 1})
    data = to_json(row)
    assert list(data.items()) == [
        ("name", "r"),
        ("value", 2.0),
        ("unit", "s"),
        ("extra", {"note": 1}),
    ]
    assert from_json(Row, data, "row.json") == row
    newer = from_json(Row, {"name": "r", "value": 1, "later": True}, "row.json")
    assert newer == Row("r", Measure(1.0), {"later": True})
    with pytest.raises(RunFolderError, match=r"^row\.json: value must be a number"):
        from_json(Row, {"name": "r", "value": "x"}, "row.json")


def test_run_json_errors_name_the_file_the_target_and_the_key() -> None:
    doc = to_json(RunInfo(run_id="r", targets=(TargetInfo("e", "m", gpus=2),)))
    doc["targets"][0]["gpus"] = "two"
    with pytest.raises(RunFolderError, match=r"^run\.json: targets\[0\]: gpus must be an integer"):
        run_info_from_json(doc)
    # A run before active_params_b: a dense model's size is its total.
    del doc["targets"][0]["active_params_b"], doc["targets"][0]["gpus"]
    doc["targets"][0]["params_b"] = 7
    assert run_info_from_json(doc).targets[0].active_params_b == 7.0


def test_a_summary_field_is_one_line() -> None:
    """What a new summary.json key costs: a field with its default. Its absence in an
    older file is that default; its value round-trips (here the existing window_s)."""
    group = Group("e", "m", "c=1", 1, None, GroupCounts(scheduled=2, ok=2), window_s=1.5)
    summary = Summary("r", (group,))
    data = to_json(summary)
    assert data["groups"][0]["window_s"] == 1.5 and data["groups"][0]["task"] is None
    assert from_json(Summary, data, "summary.json") == summary
    del data["groups"][0]["window_s"], data["groups"][0]["ttft_s"]
    loaded = from_json(Summary, data, "summary.json").groups[0]
    assert loaded.window_s is None and loaded.ttft_s == Distribution()
