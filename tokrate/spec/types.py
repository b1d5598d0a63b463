"""Frozen run specifications: the dataclasses (loading lives in tokrate.spec.config_file).

A :class:`RunSpec` is everything a benchmark run needs, resolved and validated: it is
built from a TOML file (``load_spec``) with command-line overrides applied on top, or
directly in Python. Nothing below the CLI ever sees argv. Validation errors are
:class:`~tokrate.errors.ConfigError` with a one-line message naming the file and key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "CLIENT_SIDE_CLASSES",
    "ERROR_CLASSES",
    "RESERVED_BODY_KEYS",
    "TIKTOKEN_PREFIX",
    "ApiKind",
    "ArrivalKind",
    "CapacitySpec",
    "ClientKind",
    "EndpointKind",
    "MaxTokensField",
    "LengthDistribution",
    "LoadMode",
    "KernelStamps",
    "ModelCheck",
    "PromptFormat",
    "TargetsMode",
    "TextSplit",
    "ClientSpec",
    "CompareSpec",
    "DistributedSpec",
    "EndpointSpec",
    "LoadSpec",
    "ModelSpec",
    "OutputSpec",
    "GridSpec",
    "PromptsSpec",
    "SessionsSpec",
    "SharedPrefixSpec",
    "RetrySpec",
    "RunSpec",
    "SimulatorSpec",
    "SloSpec",
    "SyntheticSpec",
    "TimeoutsSpec",
]

#: Body fields tokrate sets itself from the target and the prompt: no extra_body and no
#: ``--body`` may set them.
#: Every error class a record may carry (tokrate.runfolder.records: ``error_class``),
#: with what it means; ``[client.retry] on`` names some of them. docs/running.md's "Failure
#: handling" section is generated from the same wording.
ERROR_CLASSES: Final[dict[str, str]] = {
    "connect": "TCP/TLS connection could not be opened (refused, DNS failure, connect timeout)",
    "timeout": "a first-byte, idle-gap or total timeout expired",
    "http_4xx": "the server answered 4xx (other than 429 and context overflow)",
    "context_length": "the prompt (plus max_tokens) does not fit the model's context "
    "window (the server said so)",
    "http_429": "the server answered 429 Too Many Requests (rate limited)",
    "http_5xx": "the server answered 5xx",
    "protocol": "the response was not a valid OpenAI stream (HTML page, bad JSON, bad framing)",
    "truncated": "the stream ended before [DONE] or a finish_reason",
    "response_limit": "the response passed [client] max_response_chunks or max_response_bytes "
    "(a stream without end), and was dropped",
    "not_sent": "the client never sent the request: its own connection pool, event loop or"
    " connect held it until a timeout (a client-side failure: warned about, and not in"
    " the server's error rate)",
    "cancelled": "the request was cancelled (Ctrl-C grace period or run shutdown)",
    "worker_lost": "the worker process or node running the request died",
}
#: Error classes that are the client's failure, not the server's: left out of the
#: server's error rate and of SLO judgement (counted apart in summary.json).
CLIENT_SIDE_CLASSES: Final = frozenset({"not_sent"})
RESERVED_BODY_KEYS: Final = ("model", "messages", "prompt", "stream", "input")
#: A model's ``tokenizer`` that names a tiktoken encoding (the rest of the value), not a
#: path to a tokenizer.json.
TIKTOKEN_PREFIX: Final = "tiktoken:"

ClientKind = Literal["fast", "httpx", "openai"]
ApiKind = Literal["chat", "completions", "responses", "anthropic"]
EndpointKind = Literal["openai", "azure"]
MaxTokensField = Literal["max_tokens", "max_completion_tokens"]
LoadMode = Literal["closed", "open"]
ArrivalKind = Literal["constant", "poisson", "gamma"]
TargetsMode = Literal["interleaved", "sequential", "parallel"]
LengthDistribution = Literal["normal", "lognormal", "uniform"]
TextSplit = Literal["blocks", "file"]
ModelCheck = Literal["auto", "probe", "off"]
PromptFormat = Literal["auto", "prompts", "sharegpt", "openai-batch"]
KernelStamps = Literal["auto", "on", "off"]


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """An OpenAI-compatible server. ``base_url`` ends in /v1 (or wherever /chat/completions
    hangs). The API key is read from the environment variable ``api_key_env`` at run
    time and is never stored in the spec. ``simulator = true`` (no ``base_url``): the
    embedded simulator, which tokrate starts for the run; several such endpoints (each
    with its own ``api``) measure the simulator's tiers over several protocols in one run."""

    name: str
    base_url: str = ""
    api_key_env: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    #: Pre-flight check that every model exists before any load: "auto" (GET /models
    #: when the endpoint has it, else one tiny request per model), "probe" (always the
    #: tiny request: for endpoints whose /models lists nothing useful), "off".
    model_check: ModelCheck = "auto"
    #: The server's Prometheus text-format metrics (vLLM, SGLang, TGI ``/metrics``;
    #: llama.cpp with ``--metrics``), scraped every ``metrics_interval_s`` seconds during
    #: the run into server_metrics.parquet (no API key or headers are sent to it);
    #: None: not scraped. The embedded simulator's is always scraped.
    metrics_url: str | None = None
    metrics_interval_s: float = 1.0
    #: The protocol of this endpoint's requests; None: ``[client] api``.
    api: ApiKind | None = None
    #: Body fields sent with every request to this endpoint (a model's own win).
    extra_body: tuple[tuple[str, Any], ...] = ()
    #: "azure": Azure OpenAI (deployment URLs ``{base_url}/openai/deployments/{model}/...``
    #: with ``?api-version=``, key in the ``api-key`` header).
    kind: EndpointKind = "openai"
    #: Azure's ``api-version`` query value; setting it implies ``kind = "azure"``.
    api_version: str | None = None
    #: Served by the embedded simulator (its models are simulator tiers; no base_url).
    simulator: bool = False


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model on one endpoint (a *target*). Sizes in billions of parameters; prices in
    USD per million tokens (input, cached input, output; a hosted tier's cost is the
    requests' tokens at these, docs/definitions.md "cost"); ``gpu_hourly_usd`` x
    ``gpus`` gives a self-hosted cost from the measured throughput instead."""

    endpoint: str
    name: str
    params_b: float | None = None
    active_params_b: float | None = None
    bytes_per_param: float | None = None
    price_in_per_m: float | None = None
    #: Input tokens the provider served from its prompt cache (None: billed at
    #: ``price_in_per_m`` like the others).
    price_cached_in_per_m: float | None = None
    price_out_per_m: float | None = None
    gpu_hourly_usd: float | None = None
    gpus: int | None = None
    extra_body: tuple[tuple[str, Any], ...] = ()
    #: The size-vs-speed series this model belongs to (one power law is fitted per
    #: family, across endpoints); None: all targets of the run form one family.
    family: str | None = None
    #: Headers sent with every request for this model (over the endpoint's own).
    headers: tuple[tuple[str, str], ...] = ()
    #: Per-model ignore_eos: True sends only ``ignore_eos: true`` (no ``min_tokens``),
    #: False sends neither, None follows ``[load] ignore_eos``.
    ignore_eos: bool | None = None
    #: Chat Completions' name of the output limit: "max_completion_tokens" for models
    #: that reject ``max_tokens`` (o-series style); None: "max_tokens", switching once
    #: when the server says it is unsupported.
    max_tokens_field: MaxTokensField | None = None
    #: Exact token counts where the server sends no usage: a local ``tokenizer.json``
    #: (the ``tokenizers`` library; relative to the config file's folder) or
    #: ``"tiktoken:ENCODING"`` (an encoding tiktoken has cached). See tokrate.inputs.tokencount.
    tokenizer: str | None = None
    #: Exercise the provider's prompt cache on purpose (docs/config.md "Prompt caching"):
    #: Anthropic ``cache_control`` breakpoints on the prompt's shared prefix (api =
    #: "anthropic"; the whole prompt where it declares none, so a session's next turn
    #: reads the last one's).
    cache_control: bool = False
    #: OpenAI's ``prompt_cache_key`` sent with every request (chat, responses): requests
    #: with one key and one prefix are routed to the same cache.
    prompt_cache_key: str | None = None


@dataclass(frozen=True, slots=True)
class TimeoutsSpec:
    """Seconds. ``first_byte_s`` runs from send to the response's first body byte,
    ``idle_s`` bounds every gap between reads, ``total_s`` the whole request."""

    connect_s: float = 10.0
    first_byte_s: float = 60.0
    idle_s: float = 30.0
    total_s: float = 600.0


@dataclass(frozen=True, slots=True)
class RetrySpec:
    """Explicit, recorded retries; off by default because retries distort latency."""

    max_attempts: int = 1
    on: tuple[str, ...] = ("http_429", "http_5xx", "connect")
    backoff_s: float = 1.0
    honour_retry_after: bool = True
    #: The longest wait before a retry, whatever Retry-After says (also never longer
    #: than the request's total timeout, never past the scenario's duration).
    max_wait_s: float = 30.0


@dataclass(frozen=True, slots=True)
class ClientSpec:
    kind: ClientKind = "fast"
    api: ApiKind = "chat"
    include_usage: bool = True
    timeouts: TimeoutsSpec = field(default_factory=TimeoutsSpec)
    retry: RetrySpec = field(default_factory=RetrySpec)
    #: Prepend a short random prefix to every prompt so provider prompt caching cannot
    #: flatter TTFT.
    unique_prompts: bool = True
    #: The header every request carries its id in (``{run_id}.{scenario}.{index}``,
    #: ``.a2`` on a retry), stored in the record's ``request_id`` so a request can be
    #: found in the server's logs and traces; "" sends none.
    request_id_header: str = "X-Request-ID"
    #: Open the pool's connections before each scenario's measured window, so TTFT
    #: never carries a TCP/TLS handshake; False measures cold starts (then the TTFT of
    #: a request that opened a connection includes its set-up, ``connect_s``).
    preconnect: bool = True
    #: Per-response bounds, far above any real answer, so a server that streams without
    #: end cannot grow one request's memory (every chunk keeps a timestamp) without
    #: limit: past either the stream is dropped as error class ``response_limit``. The
    #: duration bound is ``timeouts.total_s``.
    max_response_chunks: int = 200_000
    max_response_bytes: int = 256 * 1024 * 1024
    #: Body fields sent with every request of the run (an endpoint's or a model's own
    #: win over these); ``tokrate run --body KEY=JSON`` wins over all of them.
    extra_body: tuple[tuple[str, Any], ...] = ()
    #: Headers sent with every request of the run (endpoint and model headers win).
    headers: tuple[tuple[str, str], ...] = ()
    #: Body fields that win over every extra_body (what ``tokrate run --body`` sets).
    body_overrides: tuple[tuple[str, Any], ...] = ()
    #: Stamp every read with the kernel's receive time (Linux SO_TIMESTAMPNS, fast
    #: client): "auto" where the platform can, "on" the same and says every fallback,
    #: "off" user-space stamps (``perf_counter_ns`` in the read callback).
    kernel_stamps: KernelStamps = "auto"


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """Synthetic prompts: lengths in tokens, drawn around the mean with ``*_stddev``."""

    count: int = 32
    input_tokens: int = 256
    input_stddev: float = 0.0
    output_tokens: int = 128
    output_stddev: float = 0.0
    task: str = "synthetic"
    #: Length distribution around the mean: "normal" (clipped at 1), "lognormal" or
    #: "uniform" (mean +- stddev x sqrt(3), so the stddev holds). Stddev 0 = fixed.
    distribution: LengthDistribution = "normal"
    #: Seed of the text and lengths (independent of load.seed, so the same prompts can be
    #: replayed under a different arrival seed).
    seed: int = 0


@dataclass(frozen=True, slots=True)
class SessionsSpec:
    """Generated multi-turn sessions: ``count`` sessions of ``turns`` turns, each user
    message ``input_tokens`` long (the first turn's prompt exactly that, system prompt
    of ``system_tokens`` included when set), answers capped at ``output_tokens``."""

    count: int = 8
    turns: int = 4
    input_tokens: int = 128
    output_tokens: int = 64
    system_tokens: int = 0
    #: Seconds between an answer and the next turn.
    think_time_s: float = 0.0
    task: str = "sessions"
    seed: int = 0


@dataclass(frozen=True, slots=True)
class GridSpec:
    """A length grid: ``count`` synthetic prompts per (input, output) cell, each of
    exactly that many input tokens (as the simulator counts) asking for exactly that
    many output tokens; one task per cell ("grid-in1024-out64")."""

    input_tokens: tuple[int, ...] = (128, 1024)
    output_tokens: tuple[int, ...] = (64,)
    count: int = 4
    seed: int = 0


@dataclass(frozen=True, slots=True)
class SharedPrefixSpec:
    """Prompts sharing one long system prefix (RAG, agents), and a control set of the
    same lengths whose prefixes all differ: task "shared-prefix" vs "unique-prefix" in
    one run gives TTFT with and without a server's prefix cache."""

    prefix_tokens: int = 2048
    input_tokens: int = 64
    output_tokens: int = 64
    count: int = 16
    seed: int = 0


@dataclass(frozen=True, slots=True)
class PromptsSpec:
    """Prompt sources: files/folders, bundled set names (``prompts/<name>.jsonl``), and/or
    a synthetic generator. Empty ``paths`` and ``sets`` with no ``synthetic`` means every
    bundled set."""

    paths: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()
    synthetic: SyntheticSpec | None = None
    max_tokens: int | None = None
    limit: int | None = None
    #: Plain-text files: "blocks" (every blank-line-separated block is one prompt; a file
    #: without blank lines is one prompt) or "file" (each file is one prompt).
    text_split: TextSplit = "blocks"
    #: How ``paths`` files are read: "auto" (by content: a JSON list of
    #: ``conversations`` is ShareGPT, JSONL lines with ``custom_id`` and ``body`` an
    #: OpenAI batch file, lines with ``turns`` sessions, else prompts), or one format.
    format: PromptFormat = "auto"
    sessions: SessionsSpec | None = None
    grid: GridSpec | None = None
    shared_prefix: SharedPrefixSpec | None = None
    #: Think time of sessions from files that do not set their own ``think_time_s``.
    think_time_s: float = 0.0


@dataclass(frozen=True, slots=True)
class CapacitySpec:
    """``[load] capacity``: search each target's highest level meeting every ``[slo]``
    (docs/running.md "Capacity search"). ``mode`` None follows ``load.mode``; levels
    are concurrency per target (closed loop, whole numbers) or requests/s per target
    (open loop), bisected to ``resolution`` relative width (closed loop: whole
    streams). A level *meets* when the Wilson interval (``confidence``) of the
    fraction of requests meeting every SLO lies at or above ``goodput``, *misses* when
    it lies below; a probe sends between ``min_requests`` and ``max_requests`` measured
    requests (after ``warmup_requests``, None: one per stream in closed loop,
    ``load.warmup_requests`` in open loop) and stops the moment it is decided.
    ``time_budget_s`` and ``request_budget`` bound each target's search; ``verify``
    adds probes at the found capacity and at twice it (lowering a capacity whose
    check does not meet)."""

    mode: LoadMode | None = None
    goodput: float = 0.9
    start: float = 1.0
    max_level: float = 512.0
    resolution: float = 0.05
    confidence: float = 0.95
    min_requests: int = 20
    max_requests: int = 400
    warmup_requests: int | None = None
    time_budget_s: float = 600.0
    request_budget: int = 5000
    verify: bool = False


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """How requests are sent. ``concurrency`` (closed loop) or ``rates`` (open loop,
    requests/s) is a sweep: each level is one scenario. ``requests``/``duration_s``
    bound each scenario; warm-up requests are recorded but excluded from metrics."""

    mode: LoadMode = "closed"
    concurrency: tuple[int, ...] = (1,)
    rates: tuple[float, ...] = ()
    arrival: ArrivalKind = "poisson"
    burstiness: float = 1.0
    #: Measured requests per target and level; "auto": until every statistic the run
    #: judges has its samples (tokrate.load.auto_sample), at most ``max_requests``.
    requests: int | Literal["auto"] | None = 32
    #: With ``requests = "auto"``: the most measured requests per target and level.
    max_requests: int = 1000
    duration_s: float | None = None
    warmup_requests: int = 0
    warmup_s: float = 0.0
    targets: TargetsMode = "interleaved"
    seed: int = 0
    ignore_eos: bool = False
    #: Local worker processes, or "auto": from the machine's cores and the streams the
    #: plan holds (tokrate.load.backends.selection.auto_workers).
    workers: int | Literal["auto"] = "auto"
    #: Open loop: most requests in flight per worker; a send the cap holds back waits
    #: (its send_delay_s shows it, and a warning says the cap bound).
    max_in_flight: int = 10_000
    #: Open loop: seconds over which the rate climbs linearly from 0 to the level;
    #: requests sent meanwhile are warm-up (the scenario lasts that much longer).
    ramp_up_s: float = 0.0
    #: A capacity search instead of the sweep (``tokrate run --capacity``).
    capacity: CapacitySpec | None = None
    #: USD the run may spend at the targets' token prices (``--max-cost``): a plan
    #: whose upper bound passes it is refused before anything is sent, and sending
    #: stops when the measured spend reaches it (tokrate.load.spend).
    max_cost_usd: float | None = None


@dataclass(frozen=True, slots=True)
class SloSpec:
    """Per-request service-level objectives in seconds; ``None`` means not set."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    itl_p99_s: float | None = None
    #: The answer-quality bar of the routing table (docs/quality.md): the pass rate a
    #: model must reach on a task's checked prompts, overall and per task.
    min_pass_rate: float | None = None
    min_pass_rate_by_task: tuple[tuple[str, float], ...] = ()

    @property
    def latency_set(self) -> bool:
        """Some per-request latency limit is set (the quality bar is not one)."""
        return any(v is not None for v in (self.ttft_s, self.tpot_s, self.e2e_s, self.itl_p99_s))

    def latency_limits(self) -> dict[str, float | None]:
        """The four per-request latency limits by field name (None: not set): what a
        request is judged against, without the quality bar, which is judged per task."""
        return {
            "ttft_s": self.ttft_s,
            "tpot_s": self.tpot_s,
            "e2e_s": self.e2e_s,
            "itl_p99_s": self.itl_p99_s,
        }


@dataclass(frozen=True, slots=True)
class OutputSpec:
    dir: str = "reports"
    run_id: str | None = None
    formats: tuple[str, ...] = ("png", "svg")
    hardware: str = "a100-80g"
    report: bool = True
    #: A name for the run that reports, compare and history show instead of its id.
    label: str | None = None
    #: Seconds between plain progress lines when stderr is not a terminal (CI logs).
    progress_interval_s: float = 10.0


@dataclass(frozen=True, slots=True)
class SimulatorSpec:
    """The embedded simulator used when no endpoint is configured."""

    tiers_file: str | None = None
    hardware: str = "a100-80g"
    efficiency: float = 0.8
    time_scale: float = 1.0
    seed: int = 0
    #: Each tier caches prompt prefixes (blocks of 16 tokens): a cached prefix skips its
    #: prefill, usage reports it as prompt_tokens_details.cached_tokens.
    prefix_cache: bool = False
    #: Prompts are looked up in a prefix cache that keeps nothing: usage reports 0
    #: cached tokens on every request (a provider whose cache stopped working).
    prefix_cache_cold: bool = False
    #: Chat and completions usage chunks carry a vLLM-style per-request ``metrics``
    #: object (queue, prefill, TTFT, decode time, mean ITL, tokens).
    request_metrics: bool = False


@dataclass(frozen=True, slots=True)
class DistributedSpec:
    """``ray``: None (local), "auto", or a ``ray://host:port`` address."""

    ray: str | None = None
    workers: int = 2
    num_cpus_per_worker: float = 1.0
    resources: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class CompareSpec:
    """Regression thresholds for ``baseline`` comparisons, as ``tokrate compare
    --threshold`` strings (``"ttft_p95=+10%"``, ``"decode_tps_p50=-5%"``,
    ``"error_rate=+1pp"``, ``"e2e_p95=off"``); they adjust the documented defaults.
    ``thresholds_from_history``: the folder of earlier runs whose run-to-run noise
    widens each series' threshold (``tokrate.analysis.noise``); None: the output folder
    (where ``latest-good`` lives); ``"off"``: no fit. ``confirm``: re-measure the
    scenarios of a regression once before reporting it (``tokrate.load.confirm``)."""

    thresholds: tuple[str, ...] = ()
    thresholds_from_history: str | None = None
    confirm: bool = True


@dataclass(frozen=True, slots=True)
class RunSpec:
    endpoints: tuple[EndpointSpec, ...] = ()
    models: tuple[ModelSpec, ...] = ()
    load: LoadSpec = field(default_factory=LoadSpec)
    prompts: PromptsSpec = field(default_factory=PromptsSpec)
    slo: SloSpec = field(default_factory=SloSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    client: ClientSpec = field(default_factory=ClientSpec)
    simulator: SimulatorSpec = field(default_factory=SimulatorSpec)
    distributed: DistributedSpec = field(default_factory=DistributedSpec)
    compare: CompareSpec = field(default_factory=CompareSpec)
    baseline: str | None = None
    source: str | None = None
    """The config file this spec was loaded from, for error messages and run.json."""

    @property
    def uses_simulator(self) -> bool:
        """No endpoint configured, or one is the embedded simulator."""
        return not self.endpoints or any(e.simulator for e in self.endpoints)
