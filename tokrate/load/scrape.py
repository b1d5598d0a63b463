"""Server metrics: each endpoint's Prometheus ``/metrics`` scraped during a run.

:class:`MetricsSampler` scrapes every ``[[endpoint]] metrics_url`` at a fixed interval
while the scenarios run and keeps every sample; when the run ends it writes them as
the run folder's server_metrics.jsonl (:mod:`tokrate.runfolder.server_samples`), which
the finishing process turns into server_metrics.parquet (the format:
:mod:`tokrate.runfolder.server_metrics`): this process never imports polars.

Clocks and units: ``t_s`` is seconds on the driver's monotonic clock
(``time.perf_counter_ns``) since the sampler started; ``at`` is the wall clock (Unix
seconds), the clock the records' ``started_at`` uses, so the report lines samples up
with requests. Both are read when a scrape's response headers arrive (the server
renders the page before it sends them); every sample of one scrape shares its (``t_s``,
``at``). Pages are kept compressed and parsed when the run ends, so no parse competes
with the load for the interpreter lock.

The first scrape is taken when the sampler starts (:meth:`MetricsSampler.start`
returns once it has ended, so it precedes the first request), the last when it stops
(after the last one ended), so the difference of a counter over the samples covers
the whole run.

Invariants: the sampler runs in its own thread, on its own event loop and its own
httpx client, so it never shares the benchmark's connection pool or event loop and
never waits on the load; a scrape that fails (refused, timeout, not 200, too large,
not Prometheus text) is counted in run.json and said once as a warning, never raised.
The text is parsed by ``prometheus_client``'s parser; no API key or configured header
is ever sent to a metrics URL (it may live on another host than the API).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from tokrate.client.tls import verify_context
from tokrate.runfolder.run_info import ScrapeInfo
from tokrate.runfolder.server_samples import (
    SERVER_SAMPLES_FILE,
    scrape_line,
    write_server_samples,
)
from tokrate.spec.types import EndpointSpec

if TYPE_CHECKING:
    import anyio
    import httpx

__all__ = [
    "FIRST_SCRAPE_WAIT_S",
    "MAX_PAGE_BYTES",
    "STOP_GRACE_S",
    "MetricsSampler",
    "ScrapeTarget",
    "parse_metrics_text",
    "scrape_warning",
]

#: A metrics page larger than this is refused (a vLLM page is ~100 KiB); a server that
#: streams without end cannot grow the run's memory.
MAX_PAGE_BYTES: Final = 16 * 1024 * 1024
#: The text format every engine above serves; asked for explicitly so a server that
#: can also speak OpenMetrics or protobuf answers in the one we parse.
_ACCEPT: Final = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
#: Seconds a scrape in flight when the run ends may still take to finish.
STOP_GRACE_S: Final = 1.0
#: Seconds :meth:`MetricsSampler.start` waits for every endpoint's first scrape, so a
#: counter's first reading precedes the first request (an endpoint that has not
#: answered by then is read from its first later scrape).
FIRST_SCRAPE_WAIT_S: Final = 2.0
#: Compressed pages kept unparsed during the run (parsing holds the interpreter lock:
#: ~9 ms for a vLLM page on the 2-core machine, benchmarks/server_metrics_cost.py);
#: past this the pages so far are parsed at once, so memory stays bounded.
_PAGE_BUDGET_BYTES: Final = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One endpoint's metrics URL and its scrape interval (seconds)."""

    endpoint: str
    url: str
    interval_s: float


def parse_metrics_text(text: str) -> list[tuple[str, str, float]]:
    """(sample name, labels as sorted-key JSON, value) for every sample of a
    Prometheus text page. Raises ValueError for text that is not that format (an
    HTML error page, JSON, an empty body)."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = orjson.dumps(s.labels, option=orjson.OPT_SORT_KEYS).decode()
                out.append((s.name, labels, float(s.value)))
    except ValueError:
        raise
    except Exception as err:  # the parser's other failures on hostile text are input errors too
        raise ValueError(f"{type(err).__name__}: {err}") from None
    if not out:
        raise ValueError("no samples (not a Prometheus metrics page?)")
    return out


class _Failed(Exception):
    """One scrape failed; the text says how (one line)."""


@dataclass(slots=True)
class _Tally:
    scrapes: int = 0
    failures: int = 0
    samples: int = 0
    first_error: str | None = None


class MetricsSampler:
    """Scrapes ``targets`` from :meth:`start` to :meth:`stop` (see the module doc).

    ``timeout_s``: per scrape (default: the interval, at least 2 s). A scrape that
    outlasts the interval makes the next one wait for the next tick of the fixed grid
    (start + k x interval), so samples never bunch up.
    """

    def __init__(self, targets: Sequence[ScrapeTarget], *, timeout_s: float | None = None):
        self.targets = tuple(targets)
        self._timeout_s = timeout_s
        self._tallies = {t.endpoint: _Tally() for t in self.targets}
        #: The parsed scrapes' lines of server_metrics.jsonl, kept compressed until
        #: :meth:`finish` writes them.
        self._lines = zlib.compressobj(1)
        self._packed: list[bytes] = []
        self._pages: list[tuple[str, float, float, bytes]] = []
        self._page_bytes = 0
        self._t0_ns = 0
        self._portal_cm: contextlib.AbstractContextManager[Any] | None = None
        self._portal: Any = None
        self._done: Any = None
        self._stop_event: anyio.Event | None = None
        self._first_pending = len(self.targets)
        self._first_done = threading.Event()

    def start(self) -> None:
        """Start scraping in a thread of its own; returns once every endpoint's first
        scrape has ended (at most FIRST_SCRAPE_WAIT_S)."""
        if not self.targets or self._portal is not None:
            return
        import anyio
        import httpx  # noqa: F401  imported here, not in the sampler's thread mid-run
        import prometheus_client.parser  # noqa: F401  (an import there would hold the GIL)
        from anyio.from_thread import start_blocking_portal

        self._t0_ns = time.perf_counter_ns()
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        self._stop_event = self._portal.call(anyio.Event)
        self._done = self._portal.start_task_soon(self._main)
        self._first_done.wait(FIRST_SCRAPE_WAIT_S)

    def stop(self) -> tuple[ScrapeInfo, ...]:
        """Stop scraping (a scrape in flight gets STOP_GRACE_S to finish, else it is
        dropped, not counted), parse the pages and say what each endpoint's scrape did."""
        if self._portal is not None and self._portal_cm is not None:
            assert self._stop_event is not None
            self._portal.call(self._stop_event.set)
            with contextlib.suppress(Exception):  # _main never raises; be safe anyway
                self._done.result(timeout=30)
            self._portal_cm.__exit__(None, None, None)
            self._portal = self._portal_cm = None
        self._parse_pages()
        return tuple(
            ScrapeInfo(
                endpoint=t.endpoint,
                url=t.url,
                interval_s=t.interval_s,
                scrapes=self._tallies[t.endpoint].scrapes,
                failures=self._tallies[t.endpoint].failures,
                samples=self._tallies[t.endpoint].samples,
                first_error=self._tallies[t.endpoint].first_error,
            )
            for t in self.targets
        )

    @classmethod
    def for_endpoints(cls, endpoints: Iterable[EndpointSpec]) -> MetricsSampler:
        """A sampler of every endpoint with a ``metrics_url`` (once per endpoint name)."""
        seen: dict[str, ScrapeTarget] = {}
        for ep in endpoints:
            if ep.metrics_url is not None and ep.name not in seen:
                seen[ep.name] = ScrapeTarget(ep.name, ep.metrics_url, ep.metrics_interval_s)
        return cls(list(seen.values()))

    def finish(
        self, folder: Path, *, redact: Callable[[str], str], warn: Callable[[str, str], None]
    ) -> tuple[ScrapeInfo, ...]:
        """:meth:`stop`, then write ``folder/server_metrics.jsonl`` (when anything was
        scraped) and ``warn(line, kind)`` once per endpoint whose scrapes failed (kind
        ``server_metrics:<endpoint>``, so two endpoints' lines never collapse into one).
        URLs and errors pass through ``redact`` before they reach run.json or a warning."""
        infos = tuple(
            dataclasses.replace(
                i,
                url=redact(i.url),
                first_error=None if i.first_error is None else redact(i.first_error),
            )
            for i in self.stop()
        )
        if infos:
            try:
                write_server_samples(folder, self._sample_lines())
            except OSError as err:
                warn(f"{SERVER_SAMPLES_FILE} not written ({err.strerror or err})", "server_metrics")
        for info in infos:
            line = scrape_warning(info)
            if line is not None:
                warn(line, f"server_metrics:{info.endpoint}")
        return infos

    def _sample_lines(self) -> Iterator[bytes]:
        """The lines of server_metrics.jsonl, in scrape order (call after :meth:`stop`)."""
        packed, self._packed = [*self._packed, self._lines.flush()], []
        self._lines = zlib.compressobj(1)
        unpack = zlib.decompressobj()
        for chunk in packed:
            yield unpack.decompress(chunk)
        yield unpack.flush()

    # --- the scrape loop (in the sampler's thread) -------------------------------------

    async def _main(self) -> None:
        import anyio
        import httpx

        stop = self._stop_event
        assert stop is not None
        timeout = self._timeout_s
        async with httpx.AsyncClient(
            headers={"accept": _ACCEPT},
            follow_redirects=True,
            trust_env=False,
            verify=verify_context(),  # the clients' one rule (a private CA)
        ) as client:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    for target in self.targets:
                        per = timeout if timeout is not None else max(target.interval_s, 2.0)
                        tg.start_soon(self._loop, client, target, per, stop)
                    await stop.wait()
                    # A scrape in flight may finish (a short run keeps its one sample);
                    # past the grace it is dropped.
                    scope.deadline = anyio.current_time() + STOP_GRACE_S

    async def _loop(
        self, client: httpx.AsyncClient, target: ScrapeTarget, limit_s: float, stop: anyio.Event
    ) -> None:
        import anyio

        period_ns = int(target.interval_s * 1e9)
        due_ns = time.perf_counter_ns()
        first = True
        while not stop.is_set():
            await self._scrape(client, target, limit_s)
            if first:
                first = False
                self._first_pending -= 1  # one event loop: no lock needed
                if self._first_pending <= 0:
                    self._first_done.set()
            due_ns += period_ns
            now = time.perf_counter_ns()
            if due_ns <= now:  # overran: skip the ticks it covered, keep the grid
                due_ns += ((now - due_ns) // period_ns + 1) * period_ns
            with anyio.move_on_after((due_ns - now) / 1e9):
                await stop.wait()
        # One scrape after the load ended (within the stop grace): a counter's
        # difference over the run then covers its last requests too
        # (tokrate.analysis.server_counters).
        await self._scrape(client, target, limit_s)

    async def _scrape(
        self, client: httpx.AsyncClient, target: ScrapeTarget, limit_s: float
    ) -> None:
        import anyio
        import httpx

        tally = self._tallies[target.endpoint]
        try:
            with anyio.fail_after(limit_s):
                t_ns, at, body = await _get(client, target.url)
        except _Failed as err:
            self._fail(tally, str(err))
            return
        except TimeoutError:
            self._fail(tally, f"no answer within {limit_s:g} s")
            return
        except (httpx.HTTPError, httpx.InvalidURL, OSError, UnicodeError) as err:
            self._fail(tally, f"{type(err).__name__}: {err}" if str(err) else type(err).__name__)
            return
        # Parsed after the run (see _parse_pages): here only zlib runs, which releases
        # the interpreter lock, so an in-process worker's event loop never waits on it.
        tally.scrapes += 1
        page = zlib.compress(body, 1)
        self._pages.append((target.endpoint, (t_ns - self._t0_ns) / 1e9, at, page))
        self._page_bytes += len(page)
        if self._page_bytes > _PAGE_BUDGET_BYTES:
            self._parse_pages()

    def _parse_pages(self) -> None:
        """Parse the pages kept so far into server_metrics.jsonl lines (a page that is
        not Prometheus text counts as a failed scrape)."""
        pages, self._pages, self._page_bytes = self._pages, [], 0
        for endpoint, t_s, at, page in pages:
            tally = self._tallies[endpoint]
            try:
                rows = parse_metrics_text(zlib.decompress(page).decode("utf-8", errors="replace"))
            except ValueError as err:
                self._fail(tally, str(err), scraped=True)
                continue
            tally.samples += len(rows)
            self._packed.append(self._lines.compress(scrape_line(endpoint, t_s, at, rows)))

    def _fail(self, tally: _Tally, error: str, *, scraped: bool = False) -> None:
        """Count a failed scrape (``scraped``: already counted when its page came)."""
        tally.scrapes += 0 if scraped else 1
        tally.failures += 1
        if tally.first_error is None:
            tally.first_error = error.splitlines()[0][:200] if error else "failed"


async def _get(client: httpx.AsyncClient, url: str) -> tuple[int, float, bytes]:
    """(perf_counter_ns, wall clock, body) of one GET, stamped when its headers came;
    raises _Failed for a non-200 answer or a page over MAX_PAGE_BYTES."""
    async with client.stream("GET", url) as response:
        at = time.time()
        t_ns = time.perf_counter_ns()
        if response.status_code != 200:
            raise _Failed(f"HTTP {response.status_code} {response.reason_phrase}".rstrip())
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_PAGE_BYTES:
                raise _Failed(f"page larger than {MAX_PAGE_BYTES // (1024 * 1024)} MiB")
    return t_ns, at, bytes(body)


def scrape_warning(info: ScrapeInfo) -> str | None:
    """One line for an endpoint whose scrapes failed (None when none did)."""
    if not info.failures:
        return None
    return (
        f"server metrics of endpoint {info.endpoint}: {info.failures} of {info.scrapes}"
        f" scrapes of {info.url} failed (first: {info.first_error}); the benchmark itself"
        " is unaffected; check [[endpoint]] metrics_url (vLLM, SGLang and TGI serve"
        " /metrics, llama-server needs --metrics)"
    )
