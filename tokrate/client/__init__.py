"""The streaming client: prepared requests in, raw stream facts out, records derived.

    req = build_request(endpoint, model, prompt, spec.client, include_usage=True,
                        max_tokens=None, ignore_eos=False,
                        unique_prefix=new_unique_prefix(), api_key=key)
    client = open_client("fast", pool_size=concurrency, timeouts=spec.client.timeouts)
    result = await client.stream(req)          # never raises for request failures
    record = build_record(result, run_id=..., scenario=..., prompt_id=..., task=...,
                          request_index=...)
    await client.aclose()

Needs a running asyncio event loop (uvloop recommended); anyio on asyncio works.
"""

from __future__ import annotations

from tokrate.client.base import CLIENT_KINDS, StreamClient, open_client
from tokrate.client.chunks import ChunkError, ChunkFacts, classify_chunk
from tokrate.client.request import (
    PreparedRequest,
    build_request,
    new_unique_prefix,
    redact_headers,
    without_stream_options,
)
from tokrate.client.result import StreamResult, build_record
from tokrate.client.sse import SSEDecoder, SSEEvent, SSEProtocolError

__all__ = [
    "CLIENT_KINDS",
    "ChunkError",
    "ChunkFacts",
    "PreparedRequest",
    "SSEDecoder",
    "SSEEvent",
    "SSEProtocolError",
    "StreamClient",
    "StreamResult",
    "build_record",
    "build_request",
    "classify_chunk",
    "new_unique_prefix",
    "open_client",
    "redact_headers",
    "without_stream_options",
]
