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
