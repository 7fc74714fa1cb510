"""Shared test plumbing: the live-model consent gate, the event loop lane, the
aioresponses shim, and the fixtures several test files use (telemetry read back
from the real OpenTelemetry SDK, a stream collected whole, a host-free
environment, one free of an ambient Anthropic credential)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import types
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol

import aiohttp
import pytest

from vaelii_llm import config as vconfig
from vaelii_llm import kb
from vaelii_llm import telemetry
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import StreamItem

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import HistogramDataPoint
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

# bounded_runs: every test ends by its bound, every failure's report is bounded.
pytest_plugins = ["pytester", "tests.support.bounded_runs"]

LOOPS = ("asyncio", "uvloop")
TEST_LOOP = os.environ.get("VAELII_TEST_LOOP", "").strip().lower() or "asyncio"
"""The event loop every async test runs on: ``VAELII_TEST_LOOP=uvloop`` is the
uvloop lane of .ci/run; unset, asyncio's own loop, as the README's command runs."""

if TEST_LOOP not in LOOPS:
    raise pytest.UsageError(f"VAELII_TEST_LOOP={TEST_LOOP!r}; one of {', '.join(LOOPS)}")

if TEST_LOOP == "uvloop":
    import uvloop  # an ImportError here says the lane's venv lacks the test extra

    def pytest_asyncio_loop_factories(
        config: pytest.Config, item: pytest.Item
    ) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
        """pytest-asyncio's hook: every async test and fixture runs on a uvloop loop."""
        return {"uvloop": uvloop.new_event_loop}


def pytest_report_header(config: pytest.Config) -> str:
    return f"event loop: {TEST_LOOP} (VAELII_TEST_LOOP)"


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """Collection with the cyclic collector off, then frozen out of it.

    What collection builds (modules, test items, their parameters) lives to
    the end of the run. Off while it is built, the collector does not walk a
    heap that only grows; frozen after, each later collection (a test's own
    ``gc.collect()``, or one Python starts) walks only what the tests made
    since. Garbage of collection's own is collected once, before the freeze.
    """
    gc.disable()
    try:
        return (yield)
    finally:
        gc.enable()
        gc.collect()
        gc.freeze()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip every ``llm`` and ``real`` test, with its reason printed, unless
    VAELII_LLM_LIVE consents.

    ``pytest -m llm`` (``-m real``) selects them (the default run deselects
    them through ``addopts``); consent is the separate half, so a reachable
    model on the machine, a local ``llama-server`` the real lane starts
    included, is never enough to call one.
    """
    if vconfig.live_llm():
        return
    skip = pytest.mark.skip(reason="needs VAELII_LLM_LIVE=1: the consent to call a real model")
    for item in items:
        if item.get_closest_marker("llm") or item.get_closest_marker("real"):  # not a folder
            item.add_marker(skip)


BIG_KB_SENTEXES = 10**5
"""The synthetic KB's size for the laziness tests: far past every read's bound,
so a read that is not lazy realizes thousands, where a lazy one realizes a few
dozen whatever the size (10^6, and the time it takes: tests/bench/)."""


@pytest.fixture(scope="session")
def big_kb() -> kb.KB:
    """The synthetic KB of :data:`BIG_KB_SENTEXES`, built once per run (its
    ``stats`` are shared: a test counts what it realized as a difference)."""
    return kb.synthetic(BIG_KB_SENTEXES)


@pytest.fixture
def ctrl_c_reaches_children() -> Iterator[None]:
    """Children started in the test meet SIGINT as from a terminal (it stops
    them), even when this run ignores it.

    A shell without job control starts a background job (``pytest &``, two CI
    lanes at once) with SIGINT ignored, and a child inherits an ignored signal
    through exec: a server stopped with SIGINT, as Ctrl-C stops it, would
    never hear it (uvloop's spawn resets signals, asyncio's does not). With a
    handler installed here instead, every exec'd child starts with SIGINT at
    its default; the run's own disposition comes back afterwards.
    """
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


# aioresponses 0.7.9 builds aiohttp.ClientResponse without the `stream_writer`
# argument aiohttp 3.14 added (upstream aioresponses issue #289, fix PR #288 not
# released). aiohttp reads only its `output_size`, so a response class that
# supplies a stand-in lets aioresponses work. Pass it as `response_class=` to each
# mocked call; delete this when a fixed aioresponses is released.


class MockedResponse(aiohttp.ClientResponse):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("stream_writer", types.SimpleNamespace(output_size=0))
        super().__init__(*args, **kwargs)


# --------------------------------------------------------------------------
# Telemetry, read back from the real SDK (never a global provider)


@dataclass
class Recorded:
    """The SDK's in-memory span exporter and metric reader behind the tracer
    and meter providers a test hands to :func:`vaelii_llm.telemetry.enable`."""

    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def enable(self, capture_content: bool = False) -> None:
        telemetry.enable(self.tracer_provider, self.meter_provider, capture_content)

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def names(self) -> list[str]:
        return [s.name for s in self.finished()]

    def one(self, name: str) -> ReadableSpan:
        found = [s for s in self.finished() if s.name == name]
        assert len(found) == 1, self.names()
        return found[0]

    def points(self, metric: str) -> list[tuple[str, HistogramDataPoint]]:
        data = self.metrics.get_metrics_data()
        out: list[tuple[str, HistogramDataPoint]] = []
        if data is None:
            return out
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        out.extend((m.unit or "", p) for p in m.data.data_points)  # type: ignore[misc]
        return out


@pytest.fixture
def otel() -> Iterator[Recorded]:
    """Spans and metrics recorded in memory; telemetry is off again afterwards."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    metrics = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[metrics])
    try:
        yield Recorded(spans, metrics, tracer_provider, meter_provider)
    finally:
        telemetry.disable()
        tracer_provider.shutdown()
        meter_provider.shutdown()


# --------------------------------------------------------------------------
# Streams and hosts


class _Streams(Protocol):
    def stream(self, request: Request, *, deltas: bool = False) -> AsyncIterator[StreamItem]: ...


Collect = Callable[..., Awaitable[list[StreamItem]]]


@pytest.fixture
def collect() -> Collect:
    """``await collect(provider, request, deltas=False)``: every item of one
    streamed turn, read under ``aclosing`` as the docs say to."""

    async def read(provider: _Streams, request: Request, deltas: bool = False) -> list[StreamItem]:
        async with aclosing(provider.stream(request, deltas=deltas)) as items:  # type: ignore[type-var]
            return [item async for item in items]

    return read


@pytest.fixture(autouse=True)
def registry() -> Iterator[None]:
    """Every test leaves the backend registry as it found it: the kinds it
    registers or replaces (``providers.register``) leave with it."""
    from vaelii_llm import _backends

    saved = dict(_backends.REGISTRY)
    try:
        yield
    finally:
        _backends.REGISTRY.clear()
        _backends.REGISTRY.update(saved)


@pytest.fixture
def _no_ambient_credential(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No Anthropic credential from the machine: neither ``ANTHROPIC_AUTH_TOKEN``
    nor ``ANTHROPIC_BASE_URL`` set, and no ``ant`` CLI on an empty ``PATH``; a
    test names its own key and base URL. Used with
    ``pytest.mark.usefixtures("_no_ambient_credential")``."""
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))


@pytest.fixture
def no_host_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No Ollama host variable set: what the unset rows of the table read."""
    for name in ("VAELII_OLLAMA_HOSTS", "VAELII_OLLAMA_HOST", "OLLAMA_HOST"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch
