"""Pre-flight: before any load, every endpoint answers and serves every model asked for.

Per endpoint, by its ``model_check`` (``[[endpoint]] model_check``, ``--model-check``):

- ``"auto"`` (default): ``GET {base_url}/models``. When it answers 2xx with a usable
  list (OpenAI's ``{"data": [{"id": ...}]}``, or a bare list of such objects), every
  model must be in it (a listed path to a ``.gguf`` also matches its file name or
  stem), else :class:`ModelNotServed` (exit 2) names the missing model, with a "did you mean" from the list. When the endpoint has no such list (404, an
  empty or unparsable answer), one tiny request per model (``max_tokens`` 1, not
  streamed) decides instead.
- ``"probe"``: always the tiny request per model: for endpoints whose /models lists
  nothing useful (aliases, a gateway's own names).
- ``"off"``: only that the endpoint answers HTTP at all.

Context sizes: where the /models list says how long a context each model takes
(llama.cpp ``data[].meta.n_ctx``, the per-slot share; vLLM and the simulator
``data[].max_model_len``), :func:`check_targets` returns them per target (with a
llama-server's ``meta.n_params``, ``meta.size`` and ``meta.ftype``, or ``GET /props``
``model_ftype``: :class:`~tokrate.runfolder.served_model.ServedModel`) and
:func:`unfit_prompts` names the prompts whose estimated tokens plus max_tokens cannot
fit (one warning line per target, before any load is sent). The estimate is
``Prompt.input_tokens_est`` (bytes / 4 plus the chat template): a real tokenizer may
count more, so the line says "estimated".

A /models (or /props) answer is read up to :data:`MAX_LIST_BYTES` and for at most the
pre-flight's timeout in all; a larger or slower one, or a list whose entries are not
objects with a string ``id``, is "no usable list" (the probe decides). Both requests
and the probe read through :func:`tokrate.client.bounded_read.read_bounded`: decoded
bytes are counted (a gzip bomb inflates no further than the bound), ``Accept-Encoding:
identity`` is asked for, and the time is bounded in all, not per read.

The one-token probe of a model reads at most :data:`PROBE_BODY_BYTES` of its answer
(decoded) and takes at most :data:`PROBE_DEADLINE_S` with all its tries: a server that
drips its answer, sends an endless one or inflates it past the bound, or answers 429,
is in a state a run exists to record, not misconfigured: retried while time is left
(429 and 5xx), then one warning line and the model is measured anyway.

The /models request asks for ``Connection: close``: a server that fails it (a 500) and
drops the connection without saying so must not take the probe that follows down with
it (the probe gets a connection of its own).

Every failure is one line (exit 2) that shows what the server said: its HTTP status and
the first line of its body, redacted (bearer tokens, ``sk-`` keys and the endpoint's
own key removed); a 401/403 adds "check its API key". A probe answered with a 429 or a
5xx, or not in time, or with more than the bound, is a warning (the target is measured
anyway). Nothing here is timed: these requests never become records.
"""

from __future__ import annotations

import dataclasses
import difflib
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from tokrate.client.bounded_read import ACCEPT_IDENTITY, BoundedBody, read_bounded
from tokrate.client.model_names import same_model
from tokrate.client.tls import verify_context
from tokrate.errors import EndpointUnreachable, ModelNotServed
from tokrate.inputs.prompt_base import Prompt
from tokrate.inputs.targets import Target
from tokrate.redact import redact_text, strip_control
from tokrate.runfolder.served_model import ServedModel

__all__ = [
    "BODY_LINE_CHARS",
    "PROBE_BODY_BYTES",
    "PROBE_DEADLINE_S",
    "check_targets",
    "context_tokens",
    "served_model",
    "served_models",
    "unfit_prompts",
]

#: Characters of a server's reply kept in a pre-flight error line.
BODY_LINE_CHARS: Final = 200
_TIMEOUT_S: Final = 10.0
#: Tries of the one-token probe that a 429, a 5xx or a timeout gets, 1 s then 2 s apart
#: (while PROBE_DEADLINE_S lasts).
PROBE_ATTEMPTS: Final = 3
PROBE_BACKOFF_S: Final = 1.0
#: The most of a probe's answer read, decoded: its status and first line are all the
#: pre-flight uses (an error body is a few hundred bytes).
PROBE_BODY_BYTES: Final = 4096
#: The whole probe of one model, every try and its back-off included.
PROBE_DEADLINE_S: Final = 10.0
#: The most of a GET /models (or /props) body read: a list of 10,000 models is ~2 MiB;
#: a larger answer is no usable list (the probe decides), not gigabytes in memory.
MAX_LIST_BYTES: Final = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class _Reply:
    """A GET's status and body, read within MAX_LIST_BYTES and the pre-flight's time
    (``content`` empty and ``is_success`` False when the body was over either)."""

    status_code: int
    reason_phrase: str
    content: bytes
    is_success: bool
    #: What stopped the read short ("over 4,096 bytes", "not complete within 10 s"),
    #: None when the whole answer was read.
    cut: str | None = None


def _reply_of(resp: Any, body: BoundedBody, limit_bytes: int, seconds: float) -> _Reply:
    cut = None
    if body.over:
        cut = f"an answer over {limit_bytes:,} bytes"
    elif body.late:
        cut = f"an answer not complete within {seconds:g} s"
    ok = resp.is_success and cut is None
    return _Reply(resp.status_code, resp.reason_phrase, body.content, ok, cut)


def _remaining(deadline: float) -> Any:
    """httpx timeouts for what is left until ``deadline`` (each read, connect and write
    waits at most that: one silent read cannot outlast it)."""
    import httpx

    return httpx.Timeout(max(0.01, deadline - time.monotonic()))


def _bounded_get(http: Any, url: str, timeout_s: float) -> _Reply:
    """GET ``url`` (``Connection: close``), its body read up to MAX_LIST_BYTES decoded
    and for at most ``timeout_s`` in all (httpx's timeout is per read: a server that
    sends a byte every few seconds would hold it for ever)."""
    deadline = time.monotonic() + timeout_s
    headers = {"Connection": "close", **ACCEPT_IDENTITY}
    with http.stream("GET", url, headers=headers, timeout=_remaining(deadline)) as resp:
        body = read_bounded(resp, MAX_LIST_BYTES, deadline)
        return _reply_of(resp, body, MAX_LIST_BYTES, timeout_s)


#: Prompt ids a pre-flight context line names before "and N more".
_IDS_SHOWN: Final = 8


def _model_entries(payload: bytes) -> list[dict[str, Any]]:
    """The objects of a /models body (OpenAI's ``data`` list, or a bare list)."""
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return []
    items = doc.get("data") if isinstance(doc, dict) else doc
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def served_models(payload: bytes) -> list[str] | None:
    """Model ids from a /models body; None when it is not a usable, non-empty list: one
    whose every entry is an object with a string ``id`` (``[{"id": 5}, null, "x"]`` is
    no list of models, not the models "5" and "None")."""
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    items = doc.get("data") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        return None
    ids = [item.get("id") if isinstance(item, dict) else None for item in items]
    if not all(isinstance(i, str) and i for i in ids):
        return None
    return ids  # type: ignore[return-value]


def _positive_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 40:
        return value
    return None


def _entry(payload: bytes, model: str) -> dict[str, Any] | None:
    """``model``'s /models entry, or the only entry (llama.cpp lists one model under
    whatever name it was started with)."""
    entries = _model_entries(payload)
    named = [i for i in entries if i.get("id") == model]
    return named[0] if named else (entries[0] if len(entries) == 1 else None)


def context_tokens(payload: bytes, model: str) -> int | None:
    """The context size (tokens) a /models body gives for ``model``, None when it
    says none."""
    entry = _entry(payload, model)
    if entry is None:
        return None
    meta = entry.get("meta")
    if isinstance(meta, dict) and _positive_int(meta.get("n_ctx")):
        return _positive_int(meta.get("n_ctx"))
    return _positive_int(entry.get("max_model_len"))


def _server_label(value: Any) -> str | None:
    """A short name a server gives (a weight type: ``Q4_K_M``) as it may be stored
    and shown: control characters (an escape sequence that would drive the terminal
    that prints the report) stripped, 40 characters at most; None when nothing is
    left."""
    if not isinstance(value, str):
        return None
    text = " ".join(strip_control(value).split())[:40]
    return text or None


def served_model(payload: bytes, model: str) -> ServedModel | None:
    """What a /models body says about ``model``: its context size, a
    llama-server's ``meta.n_params``, ``meta.size`` (weight bytes) and ``meta.ftype``,
    and whether it is a tokrate simulator's tier (its ``tokrate`` object; its sizes
    there are not taken: a stand-in provider keeps the sizes a provider would show);
    None when it says nothing of them."""
    entry = _entry(payload, model)
    if entry is None:
        return None
    meta = entry.get("meta")
    meta = meta if isinstance(meta, dict) else {}
    ftype = meta.get("ftype")
    served = ServedModel(
        context_tokens=context_tokens(payload, model),
        params=_positive_int(meta.get("n_params")),
        weight_bytes=_positive_int(meta.get("size")),
        weight_type=_server_label(ftype),
        source="GET /models",
        simulator=isinstance(entry.get("tokrate"), dict),
    )
    return None if served == ServedModel(source="GET /models") else served


def _with_props_ftype(http: Any, base: str, served: ServedModel) -> ServedModel:
    """A llama-server that reports its size but not its weight type in /models names
    it in ``GET /props`` (``model_ftype``), at the server's root."""
    if served.params is None or served.weight_type is not None:
        return served
    import httpx

    root = base.rstrip("/").removesuffix("/v1")
    try:
        resp = _bounded_get(http, f"{root}/props", _TIMEOUT_S)
        doc = orjson.loads(resp.content) if resp.is_success else None
    except (httpx.HTTPError, orjson.JSONDecodeError):
        return served
    ftype = _server_label(doc.get("model_ftype") if isinstance(doc, dict) else None)
    if ftype is None:
        return served
    return dataclasses.replace(served, weight_type=ftype, source="GET /models, GET /props")


def unfit_prompts(
    targets: Sequence[Target], served: Mapping[str, ServedModel], prompts: Sequence[Prompt]
) -> list[str]:
    """One line per target whose context (``served``: by target label) cannot hold
    some prompts' estimated input tokens plus their max_tokens (1 when unset)."""
    lines = []
    for t in targets:
        facts = served.get(t.label)
        ctx = None if facts is None else facts.context_tokens
        if ctx is None:
            continue
        ids = [p.id for p in prompts if p.input_tokens_est + (p.max_tokens or 1) > ctx]
        if not ids:
            continue
        shown = ", ".join(ids[:_IDS_SHOWN])
        more = f" and {len(ids) - _IDS_SHOWN} more" if len(ids) > _IDS_SHOWN else ""
        lines.append(
            f"target {t.label}: {len(ids)} of {len(prompts)} prompts cannot fit its"
            f" {ctx}-token context (estimated prompt + max_tokens): {shown}{more};"
            " expect context_length errors: use shorter prompts or a smaller max_tokens"
        )
    return lines


def _is_served(model: str, served: Sequence[str]) -> bool:
    """``model`` is in the list, or names a listed .gguf by its file name or stem
    (llama-server without ``--alias`` lists the path it was started with, and answers
    any name)."""
    return model in served or any(
        s.lower().endswith(".gguf") and same_model(model, s) for s in served
    )


def _first_line(body: bytes, secret: str | None) -> str:
    text = body.decode("utf-8", "replace")
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not line:
        return "<empty body>"
    if len(line) > BODY_LINE_CHARS:
        line = line[:BODY_LINE_CHARS] + "..."
    return redact_text(line, (secret,) if secret else ())


def _reply(resp: Any, secret: str | None) -> str:
    """``HTTP 404 Not Found: <first line of the body>``."""
    reason = f" {resp.reason_phrase}" if resp.reason_phrase else ""
    return f"HTTP {resp.status_code}{reason}: {_first_line(resp.content, secret)}"


def _did_you_mean(name: str, served: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, served, n=3, cutoff=0.5)
    if close:
        return "did you mean " + " or ".join(repr(c) for c in close) + "?"
    shown = ", ".join(repr(s) for s in served[:5])
    more = f" and {len(served) - 5} more" if len(served) > 5 else ""
    return f"it serves {shown}{more}"


def check_targets(
    targets: Sequence[Target],
    api_keys: Mapping[str, str],
    *,
    api: str = "chat",
    timeout_s: float = _TIMEOUT_S,
    warnings: list[str] | None = None,
) -> dict[str, ServedModel]:
    """Run the pre-flight of every endpoint of ``targets`` (see the module docstring);
    returns what the /models entry of each target says about its model (context size;
    a llama-server's parameters and weights), by target label, for targets whose
    entry says any of it.

    ``api`` (the run's ``[client] api``; an endpoint's own ``api`` wins) picks the
    route, body and key header of the tiny probe request. ``warnings``: where a probe
    that kept failing with a 5xx or a timeout is said (that target is measured anyway);
    None raises EndpointUnreachable for it instead.

    Raises:
        EndpointUnreachable: no HTTP answer, a 401/403, or a failed probe (exit 2).
        ModelNotServed: /models lists models and one asked for is not among them.
    """
    by_endpoint: dict[str, list[Target]] = {}
    for t in targets:
        by_endpoint.setdefault(t.endpoint.name, []).append(t)
    served: dict[str, ServedModel] = {}
    for group in by_endpoint.values():
        said: list[str] = []
        key = api_keys.get(group[0].endpoint.name)
        served.update(_check_endpoint(group, key, api, timeout_s, said))
        if said and warnings is None:
            raise EndpointUnreachable(f"{said[0]}; nothing was sent")
        if warnings is not None:
            warnings.extend(said)
    return served


def _check_endpoint(
    targets: Sequence[Target],
    api_key: str | None,
    api: str,
    timeout_s: float,
    warnings: list[str],
) -> dict[str, ServedModel]:
    import httpx

    from tokrate.client.request import auth_headers

    endpoint = targets[0].endpoint
    base = targets[0].base_url.rstrip("/")
    name = endpoint.name
    api = endpoint.api or api
    headers = dict([*auth_headers(targets[0], api, api_key), *endpoint.headers])
    where = f"endpoint {name!r} ({base})"
    try:
        with httpx.Client(timeout=timeout_s, headers=headers, verify=verify_context()) as http:
            served: list[str] | None = None
            contexts: dict[str, ServedModel] = {}
            if endpoint.model_check != "probe":
                resp = _bounded_get(http, f"{base}/models", timeout_s)
                _refuse_auth(resp, where, endpoint.api_key_env, api_key)
                if resp.is_success:
                    for t in targets:
                        facts = served_model(resp.content, t.model.name)
                        if facts is not None:
                            contexts[t.label] = _with_props_ftype(http, base, facts)
                if endpoint.model_check == "off":
                    return contexts
                if resp.is_success:
                    served = served_models(resp.content)
            if served is not None:
                for t in targets:
                    if not _is_served(t.model.name, served):
                        raise ModelNotServed(
                            f"{where} does not serve model {t.model.name!r}"
                            f" (GET /models lists {len(served)});"
                            f" {_did_you_mean(t.model.name, served)}; nothing was sent"
                        )
                return contexts
            for t in targets:
                said = _probe(http, t, base, where, api, endpoint.api_key_env, api_key)
                if said is not None:
                    warnings.append(said)
            return contexts
    except httpx.HTTPError as err:
        reason = type(err).__name__
        detail = str(err).splitlines()[0] if str(err) else ""
        detail = redact_text(detail, (api_key,) if api_key else ())
        raise EndpointUnreachable(
            f"{where} is unreachable: {reason}{': ' + detail if detail else ''}; nothing was sent"
        ) from None


def _refuse_auth(resp: Any, where: str, key_env: str | None, api_key: str | None) -> None:
    if resp.status_code in (401, 403):
        hint = f"check its API key ({key_env})" if key_env else "it wants an API key (api_key_env)"
        raise EndpointUnreachable(
            f"{where} answered {_reply(resp, api_key)}; {hint}; nothing was sent"
        )


def _v1_hint(http: Any, base: str) -> str | None:
    """ "did you mean BASE/v1" when ``base`` lacks the API's version segment and
    BASE/v1/models answers with a model list (most OpenAI-compatible servers hang their
    routes under /v1; a base URL without it 404s every request)."""
    import httpx

    if base.rstrip("/").rsplit("/", 1)[-1].lower() in ("v1", "v1beta", "openai"):
        return None
    try:
        resp = _bounded_get(http, f"{base}/v1/models", _TIMEOUT_S)
    except httpx.HTTPError:
        return None
    if not resp.is_success or served_models(resp.content) is None:
        return None
    return f"did you mean base_url {base}/v1? (GET {base}/v1/models lists models)"


def _probe(
    http: Any,
    target: Target,
    base: str,
    where: str,
    api: str,
    key_env: str | None,
    api_key: str | None,
) -> str | None:
    """One request of one output token for ``target``'s model. Raises for what is the
    configuration's fault (a 4xx other than 429: unknown model, bad key, bad body); a
    429, a 5xx, a timeout or an answer past :data:`PROBE_BODY_BYTES` is the server's
    state, which a run exists to record: retried (:data:`PROBE_ATTEMPTS`, backing off)
    while :data:`PROBE_DEADLINE_S` lasts, then returned as a warning line and the
    target measured anyway (its failures become its records)."""
    import httpx

    model = target.model.name
    deadline = time.monotonic() + PROBE_DEADLINE_S
    failed = ""
    tries = 0
    for attempt in range(PROBE_ATTEMPTS):
        if attempt:
            pause = min(PROBE_BACKOFF_S * attempt, deadline - time.monotonic())
            if pause <= 0:
                break
            time.sleep(pause)
        tries += 1
        try:
            resp = _probe_once(http, target, api, deadline)
        except httpx.ConnectTimeout:
            raise  # no connection at all: the endpoint is unreachable (exit 2)
        except httpx.TimeoutException as err:
            failed = f"no answer within {PROBE_DEADLINE_S:g} s ({type(err).__name__})"
            continue
        if resp.cut is not None:
            failed = f"HTTP {resp.status_code}, {resp.cut}"
            break  # the server's state; trying again reads the same
        if resp.is_success:
            return None
        if resp.status_code < 500 and resp.status_code != 429:
            break
        failed = _reply(resp, api_key)
    if failed:
        times = "once" if tries == 1 else f"{tries} times"
        return (
            f"{where}: a one-token request to model {model!r} failed {times}"
            f" (last: {failed}); measuring it anyway, its failures are its records"
        )
    _refuse_auth(resp, where, key_env, api_key)
    if resp.status_code == 404:
        hint = _v1_hint(http, base) or "check the model name and base_url"
        raise ModelNotServed(
            f"{where}: a one-token request to model {model!r} failed ({_reply(resp, api_key)});"
            f" {hint}; nothing was sent"
        )
    raise EndpointUnreachable(
        f"{where}: a one-token request to model {model!r} failed ({_reply(resp, api_key)});"
        " nothing was sent"
    )


def _post_bounded(http: Any, url: str, body: dict[str, Any], deadline: float) -> _Reply:
    with http.stream(
        "POST", url, json=body, headers=ACCEPT_IDENTITY, timeout=_remaining(deadline)
    ) as resp:
        read = read_bounded(resp, PROBE_BODY_BYTES, deadline)
        return _reply_of(resp, read, PROBE_BODY_BYTES, PROBE_DEADLINE_S)


def _probe_once(http: Any, target: Target, api: str, deadline: float) -> _Reply:
    from tokrate.client.fallbacks import is_max_tokens_rejection
    from tokrate.client.request import probe_request

    url, body = probe_request(target, api)
    resp = _post_bounded(http, url, body, deadline)
    if is_max_tokens_rejection(resp.status_code, resp.content) and "max_tokens" in body:
        body["max_completion_tokens"] = body.pop("max_tokens")  # o-series models
        resp = _post_bounded(http, url, body, deadline)
    return resp
