"""The simulator's answers to checkable prompts: pieces that rebuild the text as JSON
string content, the per-task accuracy declaration, nested verdicts across tiers."""

from __future__ import annotations

import itertools
import json

import pytest

from tokrate.client.request import SIM_ANSWER_FIELD
from tokrate.errors import ConfigError, SimulatorError
from tokrate.physics import count_text_tokens
from tokrate.sim.answers import ANSWER_FIELD, Reference, answer_pieces, answers_right, draw
from tokrate.sim.model import Tier, default_tiers
from tokrate.sim.tiers import load_tiers_file


def test_client_and_simulator_name_the_same_field() -> None:
    assert SIM_ANSWER_FIELD == ANSWER_FIELD


@pytest.mark.parametrize("text", ['{"name": "Ada \\"x\\""}', "naïve café ☕ 42", "a\nb\tc"])
def test_pieces_are_tokens_of_json_string_content(text: str) -> None:
    pieces = answer_pieces(text)
    assert json.loads(b'"' + b"".join(pieces) + b'"') == text
    assert len(pieces) >= count_text_tokens(text)


def test_task_accuracy_and_nesting() -> None:
    tier = Tier("t", 1.0, 1.0, accuracy=0.4, task_accuracy="classification=0.9")
    assert tier.accuracy_for("classification") == 0.9
    assert tier.accuracy_for("other") == 0.4
    with pytest.raises(SimulatorError, match="task_accuracy 'x=2'"):
        Tier("t", 1.0, 1.0, task_accuracy="x=2")
    tiers = sorted(default_tiers(), key=lambda t: t.accuracy_for("extraction"))
    refs = [Reference("x", "extraction", f"p{i}") for i in range(400)]
    right = [{r.key for r in refs if answers_right(7, t, r)} for t in tiers]
    for smaller, larger in itertools.pairwise(right):
        assert smaller <= larger  # a larger tier answers right all a smaller one does
    assert abs(len(right[-1]) / 400 - tiers[-1].accuracy_for("extraction")) < 0.05
    assert 0 <= draw(1, "a", "b") < 1


def test_tiers_file_declares_accuracy(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "tiers.toml"
    path.write_text(
        '[[tier]]\nname = "q"\nparams_b = 1\naccuracy = 0.3\ntask_accuracy = "code=0.2"\n'
    )
    (tier,) = load_tiers_file(path).tiers
    assert (tier.accuracy, tier.accuracy_for("code")) == (0.3, 0.2)
    path.write_text('[[tier]]\nname = "q"\nparams_b = 1\naccuracy = 1.5\n')
    with pytest.raises(ConfigError, match="accuracy must be in"):
        load_tiers_file(path)


def test_reference_from_a_body() -> None:
    from tokrate.sim.answers import reference

    body = {ANSWER_FIELD: {"text": "42", "task": "t", "key": "k"}, "max_tokens": 3}
    assert reference(body) == Reference("42", "t", "k", 3)
    assert reference({ANSWER_FIELD: {"text": ""}}) is None
    assert reference({"messages": []}) is None
