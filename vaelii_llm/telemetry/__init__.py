"""OpenTelemetry GenAI spans and metrics for turns, tool calls and votes.

Off by default, and free when off: nothing of OpenTelemetry is imported,
and a provider is handed out as itself, with nothing between a turn and the
backend's own code. While it is on, selection
(:func:`vaelii_llm.providers.provider`) and the vote pools hand out each
provider in one wrapper, :class:`Instrumented` (by composition: a backend
holds no telemetry code of its own, a registered one included); a provider
built by hand (a backend's ``provider`` function or class) is wrapped by
:func:`instrument`. :func:`enable` turns recording on for the providers
handed out from then on and every wrapped one (or ``VAELII_LLM_OTEL=1``,
read at each hand-out, which enables it on the global OpenTelemetry
providers); it needs the ``opentelemetry-api`` package
(``vaelii-llm[otel]``). :func:`disable` turns it off for every provider;
spans already open still end.

What is recorded, after the GenAI semantic conventions:

a turn
    a CLIENT span ``chat {gen_ai.request.model}`` with ``gen_ai.operation.name``
    ``chat``, ``gen_ai.provider.name`` (``anthropic``, ``ollama``, ``openai``, ``stub``;
    a registered backend's kind),
    ``gen_ai.request.model``/``max_tokens``/``temperature``/``stop_sequences``/
    ``stream``, ``server.address``/``server.port``, and from the
    :class:`~vaelii_llm._protocol.Response` ``gen_ai.response.model`` (the model
    that served), ``gen_ai.response.id`` (the message's id),
    ``vaelii_llm.response.request_id`` (the far end's id for the HTTP
    request, on a failure's span too), ``gen_ai.response.finish_reasons``
    (the neutral stop reason), ``gen_ai.usage.input_tokens``/``output_tokens``
    and the cache counts. A streamed turn's span covers the whole stream, from
    the call to the final Response or to the moment the caller closed it; the
    time to its first content item (a delta with ``deltas=True``, else the first
    whole block) is the attribute ``gen_ai.response.time_to_first_chunk`` in
    seconds, and the first whole block is also an event ``vaelii_llm.first_block``.
a failure
    the span ends in ERROR with ``error.type`` the refusal's type
    (``llm-timeout``, ``llm-api-error``…; another exception: its class name),
    a timeout's phase as ``vaelii_llm.timeout.phase`` (``stall`` for a far
    end that went quiet past the request's ``stall_ms``), and the exception
    recorded (its message is bounded and credential-free, as every
    refusal's is). A cancelled task sets ``vaelii_llm.cancelled``; a
    stream its caller closed before the final Response sets
    ``vaelii_llm.stream.closed_early``; neither is an error of the far end, so
    the status stays unset and no ``error.type`` is written.
a tool call
    an INTERNAL span ``execute_tool {tool}`` with ``gen_ai.operation.name``
    ``execute_tool`` and ``gen_ai.tool.name``; a refused call sets
    ``error.type`` to the refusal's type (the opening word of its error text).
a vote
    an INTERNAL span ``invoke_workflow vote`` (``gen_ai.operation.name``
    ``invoke_workflow``, ``gen_ai.workflow.name`` ``vote``) whose children are
    its turns, with ``vaelii_llm.vote.verdict``, ``.yes``, ``.no``,
    ``.failed`` and ``.calls``.
metrics
    the histograms ``gen_ai.client.operation.duration`` (s),
    ``gen_ai.client.token.usage`` (``{token}``, by ``gen_ai.token.type``) and,
    for streamed turns, ``gen_ai.client.operation.time_to_first_chunk`` (s)
    and ``gen_ai.client.operation.time_per_output_chunk`` (s, one point per
    content item after the first, from the one before), with the
    convention's attributes and bucket boundaries. A cancelled or
    closed-early turn records no metric: it neither answered nor failed.

Message content (``gen_ai.input.messages``, ``gen_ai.output.messages``,
``gen_ai.system_instructions``, ``gen_ai.tool.call.arguments``/``result``) is
recorded only with ``capture_content=True`` or
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``. A credential is
never recorded in any mode: nothing here reads a provider's headers or
credential, and a server address is the URL's host name with any
``user:password@`` cut.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import time
from collections.abc import AsyncGenerator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Coroutine
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any
from typing import Final
from typing import ParamSpec
from typing import Protocol
from typing import Self
from typing import TypeVar
from urllib.parse import urlsplit

import msgspec

from vaelii_llm import config
from vaelii_llm._closing import ClosesOnExit
from vaelii_llm._protocol import Provider
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ThinkingDelta
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm._streams import Stream
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMError
from vaelii_llm.errors import LLMTimeout

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span
    from opentelemetry.trace import Tracer
    from opentelemetry.trace import TracerProvider

__all__ = ["Instrumented", "disable", "enable", "enabled", "instrument"]

log = logging.getLogger("vaelii_llm.telemetry")

CAPTURE_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The convention's switch for recording message content."""
_CAPTURE_ON = config.TRUTHY | {"span_only", "span_and_event"}

SCOPE: Final = "vaelii_llm"

# Names as the GenAI semantic conventions spell them (tests/core/test_telemetry.py
# checks each against the installed opentelemetry-semantic-conventions).
OPERATION: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
REQUEST_STOP_SEQUENCES: Final = "gen_ai.request.stop_sequences"
REQUEST_STREAM: Final = "gen_ai.request.stream"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_ID: Final = "gen_ai.response.id"
RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ: Final = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_CREATION: Final = "gen_ai.usage.cache_creation.input_tokens"
TOKEN_TYPE: Final = "gen_ai.token.type"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
WORKFLOW_NAME: Final = "gen_ai.workflow.name"
REQUEST_ID: Final = "vaelii_llm.response.request_id"
"""The far end's id for the HTTP request (no semantic convention names it yet)."""
TOOL_SERVER: Final = "vaelii_llm.tool.server"
"""The MCP server a tool call went to (no semantic convention names it yet)."""
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"

METRIC_DURATION: Final = "gen_ai.client.operation.duration"
METRIC_TOKEN_USAGE: Final = "gen_ai.client.token.usage"
METRIC_TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"
METRIC_TIME_PER_OUTPUT_CHUNK: Final = "gen_ai.client.operation.time_per_output_chunk"

TIMEOUT_PHASE: Final = "vaelii_llm.timeout.phase"
"""Where a turn's budget ran out (``LLMTimeout.phase``: ``stall``, ``body``…)."""
CANCELLED: Final = "vaelii_llm.cancelled"
CLOSED_EARLY: Final = "vaelii_llm.stream.closed_early"
FIRST_BLOCK_EVENT: Final = "vaelii_llm.first_block"
VOTE_PREFIX: Final = "vaelii_llm.vote."

# The convention's advised bucket boundaries.
_SECONDS_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
_TOKEN_BUCKETS = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)

_HISTOGRAMS: Final = (
    ("duration", METRIC_DURATION, "s", _SECONDS_BUCKETS, "GenAI operation duration."),
    (
        "token_usage",
        METRIC_TOKEN_USAGE,
        "{token}",
        _TOKEN_BUCKETS,
        "Number of input and output tokens used.",
    ),
    (
        "first_chunk",
        METRIC_TIME_TO_FIRST_CHUNK,
        "s",
        _SECONDS_BUCKETS,
        "Time to receive the first chunk of a streamed response.",
    ),
    (
        "per_chunk",
        METRIC_TIME_PER_OUTPUT_CHUNK,
        "s",
        _SECONDS_BUCKETS,
        "Time between the chunks of a streamed response after the first.",
    ),
)
"""The histograms :func:`enable` makes: the :class:`_State` field each is
held in, its convention name, unit and advised buckets, its description."""

Params = ParamSpec("Params")
P = TypeVar("P", bound=Provider)


class _State(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`enable` set up."""

    tracer: Tracer
    duration: Histogram
    token_usage: Histogram
    first_chunk: Histogram
    per_chunk: Histogram
    capture_content: bool


active: _State | None = None
"""What :func:`enable` set up; None means off. The one attribute a turn's
hook reads while telemetry is off."""


def enable(
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    capture_content: bool = False,
) -> None:
    """Record spans and metrics from now on, on the providers given (None: the
    global OpenTelemetry ones). Content is recorded only with
    ``capture_content=True`` or :data:`CAPTURE_ENV` set to ``true``. Calling it
    again replaces the earlier setup. Raises ImportError naming the extra when
    ``opentelemetry-api`` is not installed."""
    global active
    try:
        from opentelemetry import metrics
        from opentelemetry import trace
    except ImportError as exc:
        raise ImportError(
            "vaelii_llm.telemetry needs opentelemetry-api: pip install 'vaelii-llm[otel]'"
        ) from exc
    from vaelii_llm._version import __version__

    tracer = trace.get_tracer(SCOPE, __version__, tracer_provider=tracer_provider)
    meter = metrics.get_meter(SCOPE, __version__, meter_provider=meter_provider)
    capture = capture_content or (os.environ.get(CAPTURE_ENV, "").strip().lower() in _CAPTURE_ON)
    made = {
        field: meter.create_histogram(
            name, unit=unit, description=description, explicit_bucket_boundaries_advisory=buckets
        )
        for field, name, unit, buckets, description in _HISTOGRAMS
    }
    active = _State(tracer=tracer, capture_content=capture, **made)


def disable() -> None:
    """Record nothing from now on (spans already open still end)."""
    global active
    active = None


def enabled() -> bool:
    """Whether spans and metrics are being recorded."""
    return active is not None


_warned = False


# --------------------------------------------------------------------------
# Turns: the one wrapper a provider is handed out in while telemetry records


def instrument(
    provider: Provider, name: str, *, url: str | None = None, model: str | None = None
) -> Instrumented:
    """``provider`` wrapped (:class:`Instrumented`): each turn records its
    ``chat`` span and metrics while telemetry is on (:func:`enable`, before
    or after this call), and runs the backend's own code alone while it is
    off.

    For a provider built by hand (a backend's class or its own ``provider``
    function), which is handed out bare; selection and the vote pools wrap
    what they hand out themselves, while telemetry is on (:func:`handed_out`).
    ``name`` is the span's ``gen_ai.provider.name`` unless the provider names
    its far end's (its ``endpoint.slug``); ``url`` and ``model`` (default:
    the provider's own ``base_url`` and ``model`` attributes, where it has
    them) give the server address and the model a request naming none runs.
    Wrapping a wrapped provider changes nothing.
    """
    if isinstance(provider, Instrumented):
        return provider
    slug = getattr(getattr(provider, "endpoint", None), "slug", None)
    url = url if url is not None else _text(getattr(provider, "base_url", None))
    model = model if model is not None else _text(getattr(provider, "model", None))
    return Instrumented(provider, _target(_text(slug) or name, url, model))


def handed_out(provider: Provider, kind: str) -> Provider:
    """What selection and the vote pools hand a caller (through
    :mod:`vaelii_llm._handout`): ``provider`` wrapped while telemetry is on,
    else ``provider`` itself, so a turn costs nothing while it is off (and
    :func:`enable` reaches the providers handed out from then on). Enables
    telemetry on the global OpenTelemetry providers first when
    ``VAELII_LLM_OTEL`` asks (read here): a missing ``opentelemetry-api`` is
    then a warning, logged once, never a provider refused."""
    _enable_from_environment()
    if active is None:
        return provider
    return instrument(provider, kind)


class Instrumented(ClosesOnExit):
    """A provider whose turns record spans and metrics while telemetry is on
    (made by :func:`instrument`). It is a provider itself (``complete``,
    ``stream``, ``aclose``, ``async with``); every other attribute is the
    wrapped provider's (``closed``, ``count_tokens``, a stub's
    ``requests()``…), and :attr:`wrapped` is the provider itself. Its
    ``__class__`` is the wrapped provider's, so ``isinstance(model,
    StubProvider)`` reads the same on or off (``type()`` names the wrapper)."""

    __slots__ = ("_target", "wrapped")

    def __init__(self, wrapped: Provider, target: _Target) -> None:
        self.wrapped = wrapped
        self._target = target

    def complete(self, request: Request) -> Coroutine[Any, Any, Response]:
        """The wrapped provider's ``complete``, inside its span while telemetry is on."""
        # Not a coroutine of its own: off, the turn is the backend's coroutine
        # itself, with no frame of ours for each of its awaits to pass through.
        state = active
        if state is None:
            return self.wrapped.complete(request)
        return _complete_in_span(state, self._target, request, self.wrapped.complete(request))

    def stream(self, request: Request, *, deltas: bool = False) -> AsyncGenerator[StreamItem, None]:
        """The wrapped provider's ``stream``, inside its span while telemetry is on."""
        items = self.wrapped.stream(request, deltas=deltas)
        state = active
        if state is None:
            return items
        if isinstance(items, Stream):  # closable from any task: kept so
            return items.around(functools.partial(_stream_in_span, state, self._target, request))
        return _stream_in_span(state, self._target, request, items)

    async def aclose(self) -> None:
        """Close the wrapped provider (leaving ``async with`` does too)."""
        await self.wrapped.aclose()

    async def __aenter__(self) -> Self:
        await self.wrapped.__aenter__()
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    @property  # type: ignore[misc]  # isinstance reads it: the wrapper passes for the provider
    def __class__(self) -> type:
        return type(self.wrapped)

    def __repr__(self) -> str:
        return f"Instrumented({self.wrapped!r})"


if (_mark := getattr(inspect, "markcoroutinefunction", None)) is not None:
    _mark(Instrumented.complete)  # inspect says what it is (Python 3.12+)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _enable_from_environment() -> None:
    """When telemetry is off and ``VAELII_LLM_OTEL`` (read here, as a provider
    is built) asks, enable it on the global OpenTelemetry providers."""
    global _warned
    if active is not None or not config.otel_enabled():
        return
    try:
        enable()
    except ImportError:
        if not _warned:
            _warned = True
            log.warning(
                "VAELII_LLM_OTEL is set but opentelemetry-api is not installed; "
                "no telemetry is recorded (pip install 'vaelii-llm[otel]')"
            )


class _Target(msgspec.Struct, frozen=True, gc=False):
    """What a turn's span names besides the request: who is called, where."""

    provider_name: str
    model: str | None
    address: str | None
    port: int | None


@functools.lru_cache(maxsize=64)
def _target(provider_name: str, url: str | None, model: str | None) -> _Target:
    """The span's naming of a provider: the URL's host name and port (any
    ``user:password@`` cut), made once per distinct provider."""
    address: str | None = None
    port: int | None = None
    if url:
        try:
            parts = urlsplit(url)
            address = parts.hostname
            port = parts.port or config.SCHEME_PORTS.get(parts.scheme)
        except ValueError:
            address = port = None
    return _Target(provider_name, model, address, port)


async def _complete_in_span(
    state: _State, target: _Target, request: Request, work: Awaitable[Response]
) -> Response:
    """Await ``work``, one non-streamed turn, inside its ``chat`` span."""
    turn = _Turn(state, target, request, streamed=False)
    from opentelemetry import trace

    try:
        with trace.use_span(turn.span, record_exception=False, set_status_on_exception=False):
            response = await work
    except BaseException as exc:
        turn.fail(exc)
        raise
    turn.finish(response)
    return response


async def _stream_in_span(
    state: _State,
    target: _Target,
    request: Request,
    items: AsyncGenerator[StreamItem, None],
    closed: _Closed | None = None,
) -> AsyncGenerator[StreamItem, None]:
    """``items``, one streamed turn, inside its ``chat`` span. The span covers
    the backend's work for each item and the release when the stream closes.
    ``closed``: says whether a stream that ended without its Response was
    closed by another task (closed early, not a backend's bug)."""
    from opentelemetry import context
    from opentelemetry import trace

    turn = _Turn(state, target, request, streamed=True)
    ctx = trace.set_span_in_context(turn.span)
    outcome: BaseException | None = None
    try:
        while True:
            token = context.attach(ctx)  # the backend's work runs inside the span
            try:
                item = await anext(items)
            except StopAsyncIteration:
                break
            finally:
                context.detach(token)
            turn.saw(item)
            yield item
    except BaseException as exc:  # GeneratorExit: the caller closed the stream early
        outcome = exc
        raise
    finally:
        token = context.attach(ctx)
        try:
            await items.aclose()  # the release is part of the turn
        finally:
            context.detach(token)
            if outcome is None and turn.response is None and closed is not None and closed.closed:
                outcome = GeneratorExit()  # closed early, from another task
            turn.end(outcome)


class _Closed(Protocol):
    """What says a stream was closed from another task."""

    @property
    def closed(self) -> bool: ...


class _Turn:
    """One turn's span and clock, ended exactly once."""

    __slots__ = ("_attrs", "_block", "_first", "_last", "_start", "_state", "response", "span")

    def __init__(self, state: _State, target: _Target, request: Request, *, streamed: bool) -> None:
        from opentelemetry.trace import SpanKind

        self._state = state
        model = request.model or target.model
        attrs: dict[str, Any] = {OPERATION: "chat", PROVIDER_NAME: target.provider_name}
        if model:
            attrs[REQUEST_MODEL] = model
        if target.address:
            attrs[SERVER_ADDRESS] = target.address
            if target.port:
                attrs[SERVER_PORT] = target.port
        self._attrs = dict(attrs)  # the metrics' attributes, before the span's own
        attrs[REQUEST_MAX_TOKENS] = request.max_tokens
        attrs[REQUEST_STREAM] = streamed
        if request.temperature is not None:
            attrs[REQUEST_TEMPERATURE] = request.temperature
        if request.stop_sequences:
            attrs[REQUEST_STOP_SEQUENCES] = list(request.stop_sequences)
        if state.capture_content:
            from vaelii_llm.telemetry import _content as content  # loaded when content is asked for

            attrs[INPUT_MESSAGES] = content.as_json(
                [content.message_parts(m) for m in request.messages]
            )
            system = request.system
            if system:
                texts = [system] if isinstance(system, str) else [b.text for b in system]
                parts = [{"type": "text", "content": text} for text in texts]
                attrs[SYSTEM_INSTRUCTIONS] = content.as_json(parts)
        name = f"chat {model}" if model else "chat"
        self.span: Span = state.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs)
        self._start = time.perf_counter()
        self._first: float | None = None
        self._last = 0.0  # when the last content item came
        self._block = False
        self.response: Response | None = None

    def saw(self, item: StreamItem) -> None:
        """Note a streamed item: the first content item's time, the time from
        the one before for each later one, the first whole block's event, the
        final Response."""
        if isinstance(item, Response):
            self.response = item
            return
        now = time.perf_counter()
        if self._first is None:
            self._first = now - self._start
            self.span.set_attribute(RESPONSE_TIME_TO_FIRST_CHUNK, self._first)
            self._state.first_chunk.record(self._first, self._attrs)
        else:
            self._state.per_chunk.record(now - self._last, self._attrs)
        self._last = now
        if not self._block and not isinstance(item, TextDelta | ThinkingDelta | ToolUseStart):
            self.span.add_event(FIRST_BLOCK_EVENT)
            self._block = True

    def end(self, outcome: BaseException | None) -> None:
        """End a streamed turn: whole (a caller that stops once it has the
        Response had the whole turn), closed early by its caller, or failed."""
        if outcome is None or (isinstance(outcome, GeneratorExit) and self.response is not None):
            self.finish(self.response)
        elif isinstance(outcome, GeneratorExit):
            self.span.set_attribute(CLOSED_EARLY, True)
            self.span.end()
        else:
            self.fail(outcome)

    def finish(self, response: Response | None) -> None:
        from opentelemetry.trace import StatusCode

        elapsed = time.perf_counter() - self._start
        span = self.span
        metric_attrs = dict(self._attrs)
        if response is None:  # a stream that ended without its Response: the backend's bug
            span.set_attribute(ERROR_TYPE, "_OTHER")
            span.set_status(StatusCode.ERROR, "the stream ended without its Response")
            metric_attrs[ERROR_TYPE] = "_OTHER"
            self._state.duration.record(elapsed, metric_attrs)
            span.end()
            return
        done: dict[str, Any] = {}
        if response.model:
            done[RESPONSE_MODEL] = metric_attrs[RESPONSE_MODEL] = response.model
        if response.id:
            done[RESPONSE_ID] = response.id
        if response.request_id:
            done[REQUEST_ID] = response.request_id
        if response.stop_reason is not None:
            done[RESPONSE_FINISH_REASONS] = [response.stop_reason]
        usage = response.usage
        counts = (
            (USAGE_INPUT_TOKENS, usage.input_tokens),
            (USAGE_OUTPUT_TOKENS, usage.output_tokens),
            (USAGE_CACHE_READ, usage.cache_read_input_tokens),
            (USAGE_CACHE_CREATION, usage.cache_creation_input_tokens),
        )
        done.update((key, value) for key, value in counts if value is not None)
        if self._state.capture_content:
            from vaelii_llm.telemetry import _content as content

            out: dict[str, Any] = {"role": "assistant", "parts": content.parts_of(response.content)}
            if response.stop_reason is not None:
                out["finish_reason"] = response.stop_reason
            done[OUTPUT_MESSAGES] = content.as_json([out])
        span.set_attributes(done)
        self._state.duration.record(elapsed, metric_attrs)
        for kind, count in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            if count is not None:
                self._state.token_usage.record(count, {**metric_attrs, TOKEN_TYPE: kind})
        span.end()

    def fail(self, exc: BaseException) -> None:
        elapsed = time.perf_counter() - self._start
        if _cancelled(exc, self.span):
            return
        kind = _error_type(exc)
        self._state.duration.record(elapsed, {**self._attrs, ERROR_TYPE: kind})


def _cancelled(exc: BaseException, span: Span) -> bool:
    """End ``span`` for ``exc``: a cancellation as such (True), anything else
    as an error with its ``error.type`` (False)."""
    from opentelemetry.trace import StatusCode

    if isinstance(exc, asyncio.CancelledError):
        span.set_attribute(CANCELLED, True)
        span.end()
        return True
    kind = _error_type(exc)
    span.set_attribute(ERROR_TYPE, kind)
    if isinstance(exc, LLMTimeout):
        span.set_attribute(TIMEOUT_PHASE, exc.phase)
    if isinstance(exc, LLMApiError) and exc.request_id:
        span.set_attribute(REQUEST_ID, exc.request_id)
    span.record_exception(exc)
    span.set_status(StatusCode.ERROR, kind)
    span.end()
    return False


def _error_type(exc: BaseException) -> str:
    if isinstance(exc, LLMError):
        return exc.type
    kind = type(exc)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


# --------------------------------------------------------------------------
# Tool calls and votes


class _ToolResultLike(Protocol):
    @property
    def ok(self) -> bool: ...
    @property
    def result(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...


class _VoteLike(Protocol):
    @property
    def verdict(self) -> str: ...
    @property
    def tally(self) -> Mapping[Any, int]: ...
    @property
    def calls(self) -> int: ...
    @property
    def failed(self) -> int: ...


ToolR = TypeVar("ToolR", bound=_ToolResultLike)
VoteR = TypeVar("VoteR", bound=_VoteLike)


def traced_tool(
    fn: Callable[Params, Awaitable[ToolR]],
) -> Callable[Params, Coroutine[Any, Any, ToolR]]:
    """Decorate the one function every tool call goes through (its parameters
    include ``name`` and ``input``): each call becomes an ``execute_tool``
    span when telemetry is on. Off, it only awaits ``fn``."""
    params = list(inspect.signature(fn).parameters)
    name_at = params.index("name")
    input_at = params.index("input") if "input" in params else None
    server_at = params.index("server") if "server" in params else None

    @functools.wraps(fn)
    async def call(*args: Params.args, **kwargs: Params.kwargs) -> ToolR:
        state = active
        if state is None:
            return await fn(*args, **kwargs)
        name = args[name_at] if len(args) > name_at else kwargs.get("name")
        attrs: dict[str, Any] = {OPERATION: "execute_tool", TOOL_NAME: str(name)}
        if server_at is not None:  # a tool of an MCP server: which one
            server = args[server_at] if len(args) > server_at else kwargs.get("server")
            attrs[TOOL_SERVER] = str(server)
        if state.capture_content and input_at is not None:
            from vaelii_llm.telemetry._content import arguments

            given = args[input_at] if len(args) > input_at else kwargs.get("input")
            attrs[TOOL_CALL_ARGUMENTS] = arguments(given)
        return await _run_tool(state, f"execute_tool {name}", attrs, fn(*args, **kwargs))

    return call


async def _run_tool(
    state: _State, span_name: str, attrs: dict[str, Any], work: Awaitable[ToolR]
) -> ToolR:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace import StatusCode

    span = state.tracer.start_span(span_name, kind=SpanKind.INTERNAL, attributes=attrs)
    try:
        with trace.use_span(span, record_exception=False, set_status_on_exception=False):
            result = await work
    except BaseException as exc:
        _cancelled(exc, span)
        raise
    if result.ok:
        if state.capture_content and result.result is not None:
            span.set_attribute(TOOL_CALL_RESULT, result.result)
    else:
        kind = (result.error or "").split(":", 1)[0].strip() or "_OTHER"
        span.set_attribute(ERROR_TYPE, kind)
        span.set_status(StatusCode.ERROR, kind)
    span.end()
    return result


def traced_vote(
    fn: Callable[Params, Awaitable[VoteR]],
) -> Callable[Params, Coroutine[Any, Any, VoteR]]:
    """Decorate the vote: when telemetry is on it runs inside an
    ``invoke_workflow vote`` span, so its turns' spans are its children, and
    the verdict, tally and failed count become the span's attributes."""

    @functools.wraps(fn)
    async def vote(*args: Params.args, **kwargs: Params.kwargs) -> VoteR:
        state = active
        if state is None:
            return await fn(*args, **kwargs)
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        span = state.tracer.start_span(
            "invoke_workflow vote",
            kind=SpanKind.INTERNAL,
            attributes={OPERATION: "invoke_workflow", WORKFLOW_NAME: "vote"},
        )
        try:
            with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                outcome = await fn(*args, **kwargs)
        except BaseException as exc:
            _cancelled(exc, span)
            raise
        span.set_attributes(
            {
                VOTE_PREFIX + "verdict": outcome.verdict,
                VOTE_PREFIX + "yes": outcome.tally.get("yes", 0),
                VOTE_PREFIX + "no": outcome.tally.get("no", 0),
                VOTE_PREFIX + "failed": outcome.failed,
                VOTE_PREFIX + "calls": outcome.calls,
            }
        )
        span.end()
        return outcome

    return vote
