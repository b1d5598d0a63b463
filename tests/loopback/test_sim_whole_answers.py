"""The simulator's non-streamed answer to a checkable prompt is the answer its truth
log records (issue 38): a tier that answers right returns the example's text in the
JSON body, as its stream would, on every protocol; a wrong answer is the filler."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

EXAMPLE = "billing"


def _body(api: str, model: str, key: str) -> tuple[str, dict[str, Any]]:
    answer = {"text": EXAMPLE, "task": "classification", "key": key}
    if api == "chat":
        messages = [{"role": "user", "content": "Route: I was charged twice."}]
        return "/chat/completions", {
            "model": model,
            "max_tokens": 16,
            "messages": messages,
            "tokrate_answer": answer,
        }
    if api == "responses":
        return "/responses", {
            "model": model,
            "max_output_tokens": 16,
            "input": "Route: I was charged twice.",
            "tokrate_answer": answer,
        }
    return "/messages", {
        "model": model,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "Route: I was charged twice."}],
        "tokrate_answer": answer,
    }


def _text(api: str, doc: dict[str, Any]) -> str:
    if api == "chat":
        return str(doc["choices"][0]["message"]["content"])
    if api == "responses":
        return "".join(
            part["text"]
            for item in doc["output"]
            if item["type"] == "message"
            for part in item["content"]
        )
    return "".join(block["text"] for block in doc["content"] if block["type"] == "text")


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
def test_a_right_answer_is_in_the_whole_body_as_the_truth_log_says(
    start_sim: Callable[..., str], tmp_path: Path, api: str
) -> None:
    truth = tmp_path / "truth.jsonl"
    url = start_sim(truth_log=str(truth))
    seen = {True: 0, False: 0}
    with httpx.Client(timeout=30) as http:
        # sim-1b answers classification right 70% of the time: some of each.
        for i in range(12):
            route, body = _body(api, "sim-1b", f"k{i}")
            headers = {"anthropic-version": "2023-06-01"} if api == "anthropic" else {}
            response = http.post(url + route, json=body, headers=headers)
            assert response.status_code == 200, response.text
            text = _text(api, response.json())
            line = json.loads(truth.read_text().splitlines()[-1])
            assert line["answered_right"] is (text == EXAMPLE), (line, text)
            seen[line["answered_right"]] += 1
    assert seen[True] and seen[False]
