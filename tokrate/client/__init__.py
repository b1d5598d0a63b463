"""The streaming client: prepared requests in, raw stream facts out, records derived.

    req = build_request(target, prompt, RequestSettings(), include_usage=True,
                        unique_prefix=new_unique_prefix(), api_key=key)
    client = open_client("fast", pool_size=concurrency, timeouts=spec.client.timeouts)
    result = await client.stream(req)          # never raises for request failures
    record = build_record(result, RecordContext(run_id=..., scenario=..., prompt_id=...,
                                                task=..., request_index=...))
    await client.aclose()

Needs a running asyncio event loop (uvloop recommended); anyio on asyncio works.
"""

from __future__ import annotations

from tokrate.client.base import CLIENT_KINDS, StreamClient
from tokrate.client.chunks import ChunkError, ChunkFacts, classify_chunk
from tokrate.client.factory import open_client
from tokrate.client.request import (
    PreparedRequest,
    RequestSettings,
    build_request,
    new_unique_prefix,
    without_stream_options,
)
from tokrate.client.result import RecordContext, StreamResult, build_record
from tokrate.client.sse import SSEDecoder, SSEEvent, SSEProtocolError

__all__ = [
    "CLIENT_KINDS",
    "ChunkError",
    "ChunkFacts",
    "PreparedRequest",
    "RecordContext",
    "RequestSettings",
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
    "without_stream_options",
]
