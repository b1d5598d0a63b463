"""What a worker needs of the run's configuration: a narrow, picklable settings object
instead of the whole RunSpec, so the engine, the client and every backend see exactly
the knobs that shape a request and its measurement."""

from __future__ import annotations

from dataclasses import dataclass, field

from tokrate.client.request import RequestSettings
from tokrate.redact import Redactor
from tokrate.spec.types import RetrySpec, RunSpec, TimeoutsSpec

__all__ = ["WorkerSettings"]


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """The client (``fast`` | ``httpx`` | ``openai``), its timeouts, whether to open
    connections before the measured window, the retry policy, and how requests are
    built."""

    client_kind: str = "fast"
    timeouts: TimeoutsSpec = field(default_factory=TimeoutsSpec)
    preconnect: bool = True
    retry: RetrySpec = field(default_factory=RetrySpec)
    request: RequestSettings = field(default_factory=RequestSettings)
    #: The run's redactor (it knows the run's secrets by value); applied to every text
    #: a server sent before it goes into a record.
    redactor: Redactor = field(default_factory=Redactor, repr=False)
    #: ``[client] kernel_stamps``: "auto" | "on" | "off".
    kernel_stamps: str = "auto"

    @classmethod
    def from_spec(cls, spec: RunSpec, redactor: Redactor | None = None) -> WorkerSettings:
        c = spec.client
        return cls(
            redactor=redactor or Redactor(),
            client_kind=c.kind,
            timeouts=c.timeouts,
            preconnect=c.preconnect,
            kernel_stamps=c.kernel_stamps,
            retry=c.retry,
            request=RequestSettings(
                api=c.api,
                include_usage=c.include_usage,
                ignore_eos=spec.load.ignore_eos,
                unique_prompts=c.unique_prompts,
                request_id_header=c.request_id_header,
                max_response_chunks=c.max_response_chunks,
                max_response_bytes=c.max_response_bytes,
                extra_body=c.extra_body,
                headers=c.headers,
                body_overrides=c.body_overrides,
            ),
        )
