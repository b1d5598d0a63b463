"""``tokrate init``: write a commented example bench.toml.

:func:`example_config` renders the text (a test loads it with ``load_spec``, both as
written and with the example endpoint uncommented); :func:`write_example` writes it and
refuses to overwrite an existing file unless ``force``.
"""

from __future__ import annotations

from pathlib import Path

from tokrate.errors import OutputError
from tokrate.fileio import write_atomic
from tokrate.spec.command_line import EMBEDDED_DEFAULTS

__all__ = ["DEFAULT_PATH", "example_config", "write_example"]

DEFAULT_PATH = "bench.toml"

_ENDPOINT_BLOCK = """\
[[endpoint]]
name = "local-vllm"                      # label in records and reports (unique)
base_url = "http://127.0.0.1:8000/v1"    # where /chat/completions hangs
api_key_env = "VLLM_API_KEY"             # NAME of the env var with the key, never the key
headers = { "X-Team" = "perf" }          # extra headers; auth/key/token values are redacted
model_check = "auto"                     # pre-flight: "auto" (/models, else a 1-token request
                                         # per model), "probe" (always that request), "off"
# api = "responses"                      # protocol: chat (default), completions, responses,
                                         # anthropic ([client] api sets it for all)
# extra_body = { top_k = 40 }            # body fields for every request to this endpoint
# kind = "azure"                         # Azure OpenAI (needs api_version = "2024-10-21")
# metrics_url = "http://127.0.0.1:8000/metrics"  # server's Prometheus page, drawn beside TTFT
# metrics_interval_s = 1.0               # seconds between scrapes of metrics_url

[[model]]
endpoint = "local-vllm"                  # must name an [[endpoint]]
name = "meta-llama/Llama-3.1-8B-Instruct"  # size inferred from the name (8B) unless given
# params_b = 8.0                         # total parameters, billions (wins over the name)
# active_params_b = 8.0                  # parameters read per token (MoE: fewer than total)
# bytes_per_param = 2.0                  # 2 = fp16/bf16, 1 = fp8/int8, 0.5 = int4
# price_in_per_m = 0.10                  # hosted APIs: USD per million input tokens and
# price_out_per_m = 0.40                 # per million output tokens (set both; the tier
                                         # pick ranks by cost on your own token mix)
# price_cached_in_per_m = 0.025          # cached input tokens (default: the input price)
gpu_hourly_usd = 2.50                    # self-hosted: USD per GPU-hour ...
gpus = 1                                 # ... times GPUs: each request costs the GPU time
                                         # it held at the measured throughput
extra_body = { temperature = 0.0, seed = 7 }  # merged into every request body (wins over
                                         # the endpoint's; `tokrate run --body K=JSON` wins)
# headers = { "X-Route" = "a" }          # headers for this model only
# ignore_eos = true                      # this model only: sends just ignore_eos (llama.cpp)
# max_tokens_field = "max_completion_tokens"  # models that refuse max_tokens (o-series)

[[model]]
endpoint = "local-vllm"
name = "mixtral-8x7b-instruct"           # MoE: inferred 46.7B total, 12.9B active
"""

_TEMPLATE = """\
# tokrate benchmark config. Run it with:   tokrate run -c {name}
#
# Every key is optional, and every active line below is that key's default: as
# written, this file runs the built-in simulator's tiers at one stream per target,
# 32 requests per level, each prompt's own max_tokens and no SLOs. That is not the
# demo `tokrate run` runs with no config at all:
#   {demo}.
# The commented lines are examples to turn on. Any command-line flag overrides the
# file (e.g. --concurrency 1,4,16 --requests 100). Every key: docs/config.md.

# Top-level keys come before the first table (below it, TOML would read them as keys
# of that table):
# baseline = "latest-good"               # compare against this run after the run; exit 1 on regression

# --- targets ---------------------------------------------------------------------
# With no [[endpoint]], tokrate starts its built-in simulator on 127.0.0.1 and
# benchmarks its model tiers. To measure a real OpenAI-compatible server, uncomment
# and edit this example:
#
{endpoint}

[load]
mode = "closed"             # "closed": N streams in flight; "open": arrivals at a rate (default
                            # is "open" when rates is set)
concurrency = [1]           # closed-loop levels, one scenario each, per target; a sweep:
                            # concurrency = [1, 4, 16]
# rates = [1.0, 2.0, 4.0]   # open-loop sweep, requests/s per target
arrival = "poisson"         # open loop: "constant", "poisson" or "gamma"
burstiness = 1.0            # gamma only: 1/shape (1 = Poisson, >1 burstier, <1 more regular)
requests = 32               # measured requests per target and level
# duration_s = 60.0         # or/also bound each level by time (requests then defaults to unbounded)
warmup_requests = 0         # per target, sent first, recorded but excluded from metrics
warmup_s = 0.0              # requests sent in the first warmup_s seconds are warm-up too
targets = "interleaved"     # "interleaved" (mixed in one window), "sequential", "parallel";
                            # in every mode each target gets its own concurrency slots
seed = 0                    # same seed: same prompt order and arrival times
ignore_eos = false          # ask the server to generate exactly max_tokens (vLLM/SGLang)
workers = "auto"            # local worker processes (each its own event loop); auto:
                            # one per 512 streams, at most one per CPU core
# max_cost_usd = 5.0        # with token prices: refuse a plan that may cost more, and stop
                            # sending when the measured spend reaches it (--max-cost)

[prompts]
# Where the prompts come from. With no paths, sets or generated prompts, a run sends
# tokrate's five bundled sets (chat, classification, code, extraction, summarization);
# with any of them, only what they name. Keep your own prompts in prompts/ beside
# reports/ (JSONL, .txt or .md files); every run prints and records in run.json which
# source gave how many prompts and how many were sent.
paths = []                  # your files or folders, relative to this file, e.g.
                            # paths = ["prompts/"] or ["prompts/support.jsonl"]
sets = []                   # bundled sets by name, e.g. sets = ["chat", "code"]
# max_tokens = 128          # replaces every prompt's own max_tokens
# limit = 50                # keep only the first N prompts
text_split = "blocks"       # .txt files: "blocks" (blank-line separated) or "file"

# Synthetic prompts with target lengths (estimated tokens = ceil(UTF-8 bytes / 4)):
# [prompts.synthetic]
# count = 32
# input_tokens = 256
# input_stddev = 0.0
# output_tokens = 128       # becomes each prompt's max_tokens
# output_stddev = 0.0
# distribution = "normal"   # "normal", "lognormal" or "uniform"
# task = "synthetic"
# seed = 0

[slo]                       # per-request objectives in seconds (goodput counts requests meeting all)
# ttft_s = 2.0
# tpot_s = 0.1
# e2e_s = 30.0
# itl_p99_s = 0.25

[output]
dir = "reports"             # run folders go to reports/<run-id>/
# run_id = "nightly-001"    # default: a timestamp
# label = "nightly a100"    # a name reports, compare and history show instead of the id
formats = ["png", "svg"]    # chart formats ("png", "svg", "pdf")
hardware = "a100-80g"       # bound line: a profile (h100-sxm, h200, l40s, m4-max, cpu-ddr5-8ch, ...),
                            # "bandwidth=900GB/s[,flops=300TFLOPS,memory=48GB]" or "gpu.toml"
report = true               # build charts and report.html at the end
progress_interval_s = 10.0  # without a terminal (CI logs): one progress line this often

[client]
kind = "fast"               # "fast" (lean raw reader), "httpx", "openai" (the official SDK)
api = "chat"                # "chat" (/chat/completions), "completions", "responses"
                            # (/responses) or "anthropic" (/messages); an endpoint's api wins
# extra_body = {{ seed = 7 }} # body fields for every request (endpoint and model ones win)
# headers = {{ "X-Run" = "nightly" }}   # headers for every request
include_usage = true        # ask for stream_options.include_usage (retried without if rejected)
unique_prompts = true       # random prefix per request so provider prompt caches cannot help
preconnect = true           # open connections before each measured window (false measures
                            # cold starts: TTFT from due includes the TCP/TLS handshake)
max_response_chunks = 200000     # past either bound an endless stream ends as
max_response_bytes = 268435456   # error class response_limit (memory stays bounded)
kernel_stamps = "auto"      # stamp reads with the kernel's receive time (Linux, fast client);
                            # "on" also warns where it cannot, "off" stamps in user space

[client.timeouts]           # seconds
connect_s = 10.0
first_byte_s = 60.0
idle_s = 30.0               # longest allowed gap between reads
total_s = 600.0

[client.retry]              # off by default: retries distort latency; each attempt is recorded
max_attempts = 1
on = ["http_429", "http_5xx", "connect"]
backoff_s = 1.0
honour_retry_after = true
max_wait_s = 30.0

[simulator]                 # the embedded simulator (used when no [[endpoint]] is set)
# tiers_file = "tiers.toml"
# hardware = "a100-80g"     # default: [output] hardware, so the bound is the GPU it runs on
efficiency = 0.8            # fraction of the hardware bound the simulated engine reaches
time_scale = 1.0            # > 1 runs the clock faster than real time (tests); 1 = real
seed = 0

# [distributed]             # spread the load over a Ray cluster
# ray = "auto"              # "auto", "local" (a private 127.0.0.1 cluster) or "ray://host:10001"
# workers = 2
# num_cpus_per_worker = 1.0
# resources = {{ }}

[compare]                   # thresholds for `baseline` comparisons (see docs/regressions.md)
thresholds = []             # e.g. ["ttft_p95=+10%", "decode_tps_p50=-5%", "e2e_p95=off"]
# thresholds_from_history = "off"   # default: widen to the run-to-run noise of earlier runs in [output] dir
confirm = true              # re-measure a regressed scenario once before reporting it
"""


def _demo() -> str:
    """What ``tokrate run`` without a config sends, in words (from the one place it is
    set: :data:`tokrate.spec.command_line.EMBEDDED_DEFAULTS`)."""
    d = EMBEDDED_DEFAULTS
    levels = ",".join(str(c) for c in d["load.concurrency"])  # type: ignore[attr-defined]
    return (
        f"concurrency {levels}; {d['load.requests']} requests per target and level; "
        f"{d['prompts.max_tokens']} output tokens; SLOs TTFT <= {d['slo.ttft_s']} s, "
        f"TPOT <= {d['slo.tpot_s']} s"
    )


def example_config(name: str = DEFAULT_PATH, *, with_endpoints: bool = False) -> str:
    """The example config text. ``with_endpoints`` writes the example [[endpoint]] and
    [[model]] blocks active instead of commented out."""
    block = _ENDPOINT_BLOCK.rstrip("\n")
    if not with_endpoints:
        block = "\n".join(f"# {line}" if line else "#" for line in block.split("\n"))
    return _TEMPLATE.format(name=name, endpoint=block, demo=_demo())


def write_example(path: str | Path = DEFAULT_PATH, *, force: bool = False) -> Path:
    """Write :func:`example_config` to ``path`` and return it.

    Raises:
        OutputError: the file exists and ``force`` is False, or it cannot be written.
    """
    target = Path(path)
    if target.is_dir():
        raise OutputError(f"{target}: is a directory; give a file name such as {DEFAULT_PATH}")
    if target.exists() and not force:
        raise OutputError(f"{target}: already exists (use --force to overwrite)")
    try:
        write_atomic(target, example_config(target.name).encode("utf-8"))
    except OSError as err:
        raise OutputError(f"{target}: cannot write ({err.strerror})") from None
    return target
