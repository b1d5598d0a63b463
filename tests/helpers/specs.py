"""The run a test sends, as one call: :func:`sim_spec`.

Most end-to-end tests run a small benchmark against a simulator (or the hostile
server) on 127.0.0.1 and differ only in a few settings: the models, the load, the
prompt shape, the client. :func:`sim_spec` builds that :class:`~tokrate.spec.types.RunSpec`
with defaults small enough for a loaded 2-core machine, so each test states only what
it is about.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokrate.spec.command_line import SIM_ENDPOINT
from tokrate.spec.types import (
    ClientSpec,
    CompareSpec,
    DistributedSpec,
    EndpointSpec,
    LoadSpec,
    ModelSpec,
    OutputSpec,
    PromptsSpec,
    RunSpec,
    SimulatorSpec,
    SloSpec,
    SyntheticSpec,
)

__all__ = ["sim_spec", "synthetic_prompts"]


def synthetic_prompts(
    tokens: int = 16, *, count: int = 8, input_tokens: int = 16, **synthetic: Any
) -> PromptsSpec:
    """``count`` generated prompts of ``input_tokens`` asking for ``tokens`` output
    tokens each (``max_tokens`` too, so the server stops there); further
    SyntheticSpec fields in ``synthetic``."""
    return PromptsSpec(
        synthetic=SyntheticSpec(
            count=count, input_tokens=input_tokens, output_tokens=tokens, **synthetic
        ),
        max_tokens=tokens,
    )


def sim_spec(
    url: str | EndpointSpec | None,
    out: Path,
    *,
    models: Sequence[str | ModelSpec] | None = None,
    run_id: str = "run",
    endpoint: str = "sim",
    prompts: PromptsSpec | None = None,
    client: ClientSpec | None = None,
    simulator: SimulatorSpec | None = None,
    distributed: DistributedSpec | None = None,
    slo: SloSpec | None = None,
    compare: CompareSpec | None = None,
    baseline: str | None = None,
    report: bool = False,
    formats: tuple[str, ...] = ("png",),
    label: str | None = None,
    **load: Any,
) -> RunSpec:
    """A run of ``models`` on the server at ``url`` (one endpoint named ``endpoint``, or
    the EndpointSpec given; None: the embedded simulator, with ``simulator``'s
    settings), written to ``out/run_id``. ``models`` defaults to sim-1b on a server, every tier on the
    embedded simulator.

    ``load`` are :class:`~tokrate.spec.types.LoadSpec` fields (default: closed loop, 2
    streams, 4 requests per target); ``prompts`` defaults to
    :func:`synthetic_prompts` (8 prompts, 16 tokens out). No report unless ``report``
    (then in ``formats``). A model given as a name gets default settings; give a
    ModelSpec (of ``endpoint``) for sizes, tokenizers or extra_body.
    """
    load = {"concurrency": (2,), "requests": 4, **load}
    if isinstance(url, EndpointSpec):
        endpoints: tuple[EndpointSpec, ...] = (url,)
    else:
        endpoints = () if url is None else (EndpointSpec(endpoint, url),)
    owner = endpoints[0].name if endpoints else SIM_ENDPOINT
    if models is None:
        models = ("sim-1b",) if url is not None else ()
    return RunSpec(
        endpoints=endpoints,
        models=tuple(ModelSpec(owner, m) if isinstance(m, str) else m for m in models),
        load=LoadSpec(**load),
        prompts=prompts or synthetic_prompts(),
        slo=slo or SloSpec(),
        output=OutputSpec(dir=str(out), run_id=run_id, report=report, formats=formats, label=label),
        client=client or ClientSpec(),
        simulator=simulator or SimulatorSpec(),
        distributed=distributed or DistributedSpec(),
        compare=compare or CompareSpec(),
        baseline=baseline,
    )
