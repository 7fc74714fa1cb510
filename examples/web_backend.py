"""An async web backend: an aiohttp.web app that answers questions over the KB.

Run ``python examples/web_backend.py [--host 127.0.0.1] --port 8080`` (``--port 0``
takes a free port; the address is printed, then which backend and model
answer), then open http://localhost:8080/ in a browser: type a question and
watch the tool calls and the answer stream in, and who answered it. Or::

    curl -s localhost:8080/ask -d '{"question": "Who is Miss Muffet afraid of?"}'
    curl -sN localhost:8080/ask/stream -d '{"question": "Who is Miss Muffet afraid of?"}'

What it shows:

* ``GET /``: one page, served by the app itself (no build step, no external
  asset), that posts to ``/ask/stream`` and draws each event as it arrives;

* one provider for the app's lifetime, opened on startup and closed on cleanup
  (``cleanup_ctx``), shared by every request: the backends are safe to share
  within one event loop, and a slow turn holds only its own request;
* ``POST /ask`` with ``{"question": str, "timeout_ms": int?, "stall_ms": int?}``
  runs the tool loop (:func:`vaelii_llm.agent.run`; ``stall_ms`` is each
  turn's :attr:`~vaelii_llm.Request.stall_ms`) and answers ``{"answer", "tool_calls",
  "stop_reason", "usage"}`` (with ``stopped``, ``turns`` and ``answered_by``:
  the backend and model, or the scripted stub);
* ``POST /ask/stream`` answers ``text/event-stream``: a ``tool_call`` and a
  ``tool_result`` event per call (before them, a ``tool_input`` event per
  piece of the call's arguments as the model writes them, on a backend that
  streams them), a ``text`` event per delta, a ``tools_ignored`` event when
  the far end shows it read the prompt without the tools (the page says so and
  names the fix), then ``final`` (the same object ``/ask`` answers), or
  ``error`` if the model fails midway;
* errors as JSON, never a traceback page: a body that is not exactly
  ``{"question": str, "timeout_ms": int?, "stall_ms": int?}`` (empty, not
  JSON, a missing ``question``, a field it does not take, nesting of any depth where a string
  or a number goes) is 400 saying which; a turn over its ``timeout_ms`` budget
  is 504 ``{"error": "llm-timeout"}``; any other refusal from the model is 502
  with its type; anything else is 500 ``{"error": "internal"}``. A 502 or 504
  says the refusal's type and a short reason; the refusal's whole message
  (which names the upstream address) goes to the server's log, not to a browser;
* bounds a client cannot lift: a body over 64 KiB is 413; a request's head,
  and then its body, must each arrive within ``--read-timeout`` seconds
  (:data:`READ_TIMEOUT_S`; a body that does not is 408), and after an answer the
  next head on a kept-alive connection too; at most ``--max-connections`` are
  open at once (by default :data:`MAX_CONNECTIONS`, or half the process's
  descriptor limit if that is lower), and a new one past the cap takes the place
  of the oldest one that is not running a request (still sending its head or
  body, or idle between requests), so a crowd of slow-header, body-dripping or
  idle connections cannot starve a real request (:class:`Guard`);
* a request from another site is refused before its body is read: an
  ``Origin`` that is not this server's own (``null`` included) is 403, and on a
  loopback socket a ``Host`` that is not a loopback name (``localhost``, a
  loopback address: what a DNS-rebinding page sends) is 421
  (:func:`foreign_request`);
* a client of ``/ask/stream`` that stops reading is dropped once the socket's
  buffers are full and :data:`WRITE_TIMEOUT_S` has passed, and its turn ended,
  so it holds no more than those buffers.

With nothing configured, or the stub named (``VAELII_LLM_PROVIDER=stub``),
the scripted stub answers every question with a line saying which. Set
``VAELII_LLM_PROVIDER`` before starting it to serve a real model: ``ollama``
(an Ollama at ``VAELII_OLLAMA_HOST``, a model with tools in
``VAELII_OLLAMA_MODEL``), ``anthropic`` (``ANTHROPIC_API_KEY``) or ``openai``
(a server at ``OPENAI_BASE_URL``); ``vaelii-llm config`` lists every kind's
switches. A configured backend that cannot answer at start is logged once with
the reason (its address and what to do), and both routes answer 503
``{"error": "no-model"}`` naming the kind and the refusal's type (never the
address) until it is fixed and the server restarted: never the stub in its place.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import math
import os
import socket
import sys
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from contextlib import aclosing
from typing import Annotated
from typing import Any
from typing import Final
from typing import cast
from typing import get_args

import msgspec
from aiohttp import web

from vaelii_llm import Provider
from vaelii_llm import Request
from vaelii_llm import agent
from vaelii_llm import config
from vaelii_llm import errors
from vaelii_llm import kb
from vaelii_llm import providers
from vaelii_llm import tools
from vaelii_llm.providers.stub import StubProvider

log = logging.getLogger("web_backend")

STUB_ANSWER = (
    "No model is configured: set VAELII_LLM_PROVIDER and restart "
    "(`vaelii-llm status` says which backend answers)."
)
STUB_NAMED_ANSWER = (
    "The scripted stub answers, as VAELII_LLM_PROVIDER=stub asks: no model read the "
    "question. Set VAELII_LLM_PROVIDER to ollama, anthropic or openai and restart to "
    "serve a model."
)
DEFAULT_TIMEOUT_MS = 60_000
MAX_BODY_BYTES: Final = 64 * 1024
READ_TIMEOUT_S: Final = 10.0
"""How long a connection may take to send a request's head, and then its body;
after an answer, how long a kept-alive connection may take to send its next head."""
STREAM_BUFFER_BYTES: Final = 64 * 1024
"""What ``/ask/stream`` queues for one client past what it has read: the
transport's buffer and the socket's send buffer are each held to this, so a
client that reads slowly waits for the model's words instead of the server
holding them for it."""
WRITE_TIMEOUT_S: Final = READ_TIMEOUT_S
"""How long a client of ``/ask/stream`` may leave what it was sent unread once
the socket's buffers are full: past it the client is dropped and its turn ended.
A client that never reads would otherwise hold its turn, and every event queued
for it, until the turn's own deadline; no write waits past that deadline either."""
MAX_CONNECTIONS: Final = 1000
"""The most connections served at once, below the usual 1,024-descriptor limit."""

PROVIDER = web.AppKey("provider", Provider)
TOOLSET = web.AppKey("toolset", tools.Toolset)
ANSWERED_BY = web.AppKey("answered_by", str)
"""Who answers the app's questions: the backend and its model, or the stub."""


class AskBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What both routes accept; anything else (an unknown field included) is a 400."""

    question: str
    timeout_ms: Annotated[int, msgspec.Meta(ge=1, le=600_000)] = DEFAULT_TIMEOUT_MS
    stall_ms: Annotated[int, msgspec.Meta(ge=1, le=600_000)] | None = None


ASK_DECODER = msgspec.json.Decoder(AskBody)


class NoModel(Exception):
    """The configured backend ``kind`` cannot answer. The message, for the
    server's log, says why, where and what to do (``reason``); ``public``, what
    a client is told, names the kind and the refusal's type alone: the reason
    names the upstream's address, which is no browser's business."""

    def __init__(self, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason
        refusal = reason.split(":", 1)[0]
        named = f" ({refusal})" if refusal in get_args(errors.ErrorType) else ""
        self.public = f"{kind} cannot answer{named}; the server's log says why and what to do"
        super().__init__(f"{kind} cannot answer: {reason}")


NO_MODEL = web.AppKey("no_model", NoModel)
"""Why the configured backend cannot answer, when it could not at start."""


async def configured_provider() -> Provider:
    """The configured backend; the stub, answering a line saying so, when none
    is configured. A configured backend that cannot answer is :class:`NoModel`
    with the reason :func:`vaelii_llm.providers.unavailable_reason` gives (the
    one place that words it, for every registered kind), never the stub."""
    kind = config.provider_kind()
    if kind != "stub":
        reason = await providers.unavailable_reason(kind)
        if reason is not None:
            raise NoModel(kind, reason)
    said = STUB_NAMED_ANSWER if stub_named() else STUB_ANSWER
    model = await providers.provider(kind, stub={"default": said})
    if kind != "stub" and isinstance(model, StubProvider):  # it went away since the probe
        await model.aclose()
        raise NoModel(kind, "it stopped answering at start; `vaelii-llm status` checks")
    return model


def stub_named() -> bool:
    """Whether the stub answers because it was named, not for want of a kind."""
    return config.provider_kind() == "stub" and bool(
        os.environ.get("VAELII_LLM_PROVIDER", "").strip()
    )


def answered_by(model: Provider) -> str:
    """Who answers: the configured backend and its model, or the scripted
    stub and why it answers (printed at start and shown with each answer)."""
    if isinstance(model, StubProvider):
        why = "named as the provider" if stub_named() else "nothing is configured"
        return f"the scripted stub, not a model ({why})"
    name = getattr(model, "model", None)
    return f"{config.provider_kind()} ({name or 'the model the server chooses'})"


def error_body(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"error": kind, "message": message}, status=status)


def llm_status(exc: errors.LLMError) -> int:
    """504 for a turn that ran over its budget, 502 for any other refusal."""
    return 504 if isinstance(exc, errors.LLMTimeout) else 502


def llm_failure(exc: errors.LLMError) -> dict[str, Any]:
    """What a client is told of a refusal from the model: its type, a short reason
    and the status. The whole message, which names the upstream address (and may
    quote the far end), goes to the server's log instead."""
    status = llm_status(exc)
    log.warning("the model refused (%s): %s", exc.type, exc)
    if isinstance(exc, errors.LLMTimeout):
        reason = f"the model did not answer in time ({exc.phase})"
    elif isinstance(exc, errors.LLMApiError):
        reason = f"the model's server answered HTTP {exc.status}"
    else:
        reason = "the model could not answer; the server's log has the details"
    return {"error": exc.type, "message": reason, "status": status}


@web.middleware
async def errors_as_json(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The one place a failure becomes a status: JSON always, never a traceback."""
    try:
        return await handler(request)
    except BadBody as exc:
        return error_body(400, "bad-request", str(exc))
    except NoModel as exc:
        return error_body(503, "no-model", exc.public)
    except errors.LLMError as exc:
        failure = llm_failure(exc)
        return error_body(failure["status"], failure["error"], failure["message"])
    except web.HTTPException as exc:  # aiohttp's own 404, 405, 413...
        return error_body(exc.status, "http", exc.reason)
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_body(500, "internal", "the server failed; the log has the details")


def loopback_name(host: str) -> bool:
    """Whether ``host`` (a ``Host`` header's name, port cut) names this machine
    whatever a resolver says: ``localhost`` or a loopback address literal."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def host_name(value: str) -> str | None:
    """The name of a ``Host`` header (its port cut), or None when it is no
    ``name[:port]`` (a ``[v6]`` name keeps its brackets)."""
    if value.startswith("["):
        end = value.find("]") + 1
        name, port = value[:end], value[end:]
        if not end or (port and not (port[:1] == ":" and port[1:].isdigit())):
            return None
        return name
    name, colon, port = value.partition(":")
    if colon and not port.isdigit():
        return None
    return name or None


def foreign_request(request: web.Request) -> tuple[int, str] | None:
    """Why a request comes from somewhere it must not (a status and a line), or
    None. On a connection that reached a loopback address (decided by that
    address, not by a name) the ``Host`` must name this machine, so a
    page on another site reaching it through a name that resolves here (DNS
    rebinding) is 421, as the MCP server answers; any ``Origin`` sent must be
    this server's own (``http://`` and the ``Host``), so a foreign page's form or
    ``fetch`` (``Origin: null`` from a sandbox included) is 403 before its body is
    read or a model turn runs. A request with no ``Origin`` (curl, a same-origin
    GET) is served."""
    host = request.headers.get("Host", "")
    local = request.transport.get_extra_info("sockname") if request.transport else None
    if local and loopback_name(str(local[0]).split("%", 1)[0]):
        name = host_name(host)
        if name is None or not loopback_name(name):
            return 421, "this server answers only to a loopback name (localhost, 127.0.0.1)"
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"http://{host}":
        return 403, "a request from another site's page is refused"
    return None


@web.middleware
async def guarded(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Refuse a foreign request (:func:`foreign_request`), then read the whole
    body within the :class:`Guard`'s read timeout (:data:`READ_TIMEOUT_S` with
    no guard) before the handler runs; while the handler runs, the connection
    counts as a real request to the guard."""
    foreign = foreign_request(request)
    if foreign is not None:
        status, message = foreign
        refused = error_body(status, "forbidden" if status == 403 else "misdirected", message)
        refused.force_close()  # its body, if any, is never read
        return refused
    guard = request.app.get(GUARD)
    connection = guard.open.get(request.transport) if guard and request.transport else None
    if connection is not None:
        connection.reading()
    try:
        try:
            async with asyncio.timeout(guard.read_timeout_s if guard else READ_TIMEOUT_S):
                await request.read()  # kept: the handler's own read() answers it again
        except TimeoutError:
            late = error_body(408, "body-timeout", "the body did not arrive in time")
            late.force_close()
            return late
        if connection is not None:
            connection.running()
        return await handler(request)
    finally:
        if connection is not None:
            connection.idle()


class BadBody(Exception):
    """The request body is not what the routes take."""


BODY_SHAPE = '{"question": str, "timeout_ms": int?, "stall_ms": int?}'


async def read_body(request: web.Request) -> AskBody:
    raw = await request.read()
    if not raw.strip():
        raise BadBody(f"the body is empty; send {BODY_SHAPE}")
    try:
        # typed: the decoder descends no deeper than AskBody's own shape, so a body
        # nested past it is refused at its first bracket, whatever its depth
        return ASK_DECODER.decode(raw)
    except RecursionError:
        raise BadBody(f"the body nests too deep; send {BODY_SHAPE}") from None
    except msgspec.ValidationError as exc:
        raise BadBody(f"{exc}; send {BODY_SHAPE}") from None
    except msgspec.DecodeError as exc:
        raise BadBody(f"the body is not JSON ({exc}); send {BODY_SHAPE}") from None


def first_request(app: web.Application, body: AskBody) -> Request:
    return agent.request(
        body.question, app[TOOLSET], timeout_ms=body.timeout_ms, stall_ms=body.stall_ms
    )


def model_of(app: web.Application) -> Provider:
    """The app's provider, or :class:`NoModel` (a 503) with the reason it has none."""
    if NO_MODEL in app:
        held = app[NO_MODEL]
        raise NoModel(held.kind, held.reason)  # afresh: no traceback grows on the held one
    return app[PROVIDER]


async def ask(request: web.Request) -> web.StreamResponse:
    body = await read_body(request)
    app = request.app
    result = await agent.run(model_of(app), app[TOOLSET], first_request(app, body))
    return web.json_response(summary(app, result))


def summary(app: web.Application, result: agent.AgentResult) -> dict[str, Any]:
    """What ``/ask`` answers and ``final`` carries: the loop's summary and who answered."""
    return {**result.summary(), "answered_by": app[ANSWERED_BY]}


def sse(event: str, data: Any) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + msgspec.json.encode(data) + b"\n\n"


async def ask_stream(request: web.Request) -> web.StreamResponse:
    """Events as the loop runs. The head is sent with the first event, so a
    model that fails before saying anything still gets its 502 or 504."""
    body = await read_body(request)
    app = request.app
    items = agent.events(model_of(app), app[TOOLSET], first_request(app, body))
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    budget = body.timeout_ms / 1000
    loop = asyncio.get_running_loop()
    until = loop.time() + budget  # the model turn's deadline: a write waits no longer
    async with aclosing(items):
        try:
            async for item in items:
                if not response.prepared:
                    bound_buffers(request)
                    await response.prepare(request)
                if isinstance(item, agent.AgentResult):
                    await sent(request, response, sse("final", summary(app, item)), until)
                else:
                    await sent(request, response, sse(item.type, item), until)
                    if isinstance(item, agent.ToolCallFinished):
                        until = loop.time() + budget  # the next model turn starts after this
        except errors.LLMError as exc:
            if not response.prepared:
                raise  # nothing sent yet: the middleware answers 502 or 504
            # the turn is over: its refusal gets the write bound of its own
            await sent(request, response, sse("error", llm_failure(exc)), math.inf)
        except ClientGone:
            return response  # dropped: the turn ends as the loop is closed
    await response.write_eof()
    return response


def bound_buffers(request: web.Request) -> None:
    """Hold what one client of ``/ask/stream`` may have queued to
    :data:`STREAM_BUFFER_BYTES`, in the transport and in the socket."""
    transport = request.transport
    if transport is None:
        return
    transport.set_write_buffer_limits(high=STREAM_BUFFER_BYTES)
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_BUFFER_BYTES)


class ClientGone(Exception):
    """A client of ``/ask/stream`` stopped reading and was dropped."""


async def sent(
    request: web.Request, response: web.StreamResponse, data: bytes, until: float
) -> None:
    """``data`` written to the client, waiting at most :data:`WRITE_TIMEOUT_S`
    for it to take what is queued, and never past ``until`` (the model turn's
    deadline: a client that does not read holds no turn past it); a client
    that does not take it is dropped (:class:`ClientGone`), so what one client
    may hold is the socket's buffers."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout_at(min(loop.time() + WRITE_TIMEOUT_S, until)):
            await response.write(data)
    except TimeoutError:
        log.info("dropped a client of /ask/stream that stopped reading")
        if request.transport is not None:
            request.transport.abort()
        raise ClientGone from None
    except ConnectionResetError:  # it went away while being written to
        raise ClientGone from None


PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Ask the knowledge base</title>
<link rel="icon" href="data:,">
<style>
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 46rem; margin: 2rem auto;
         padding: 0 1rem; color: #1d1d1f; }
  form { display: flex; gap: .5rem; }
  input { flex: 1; font: inherit; padding: .4rem .6rem; }
  button { font: inherit; padding: .4rem 1rem; }
  #calls { list-style: none; padding: 0; }
  #calls li { font: 13px/1.4 ui-monospace, monospace; background: #f3f3f5;
              border-radius: 4px; padding: .4rem .6rem; margin: .4rem 0;
              white-space: pre-wrap; overflow-wrap: anywhere; }
  #calls .result { color: #555; margin-left: 1.5rem; }
  #answer { white-space: pre-wrap; font-size: 1.1rem; min-height: 1.5rem; }
  #status { color: #666; font-size: 13px; }
  #status.error { color: #b00020; }
  #notice { color: #b00020; font-size: 14px; }
</style>
</head>
<body>
<h1>Ask the knowledge base</h1>
<form id="ask">
  <input id="question" name="question" autocomplete="off" required
         value="Who is Miss Muffet afraid of?" aria-label="Your question">
  <button id="send" type="submit">Ask</button>
</form>
<ul id="calls"></ul>
<div id="answer" aria-live="polite"></div>
<p id="notice" role="alert"></p>
<p id="status"></p>
<script>
"use strict";
const form = document.getElementById("ask");
const calls = document.getElementById("calls");
const answer = document.getElementById("answer");
const statusLine = document.getElementById("status");
const notice = document.getElementById("notice");

function say(text, isError) {
  statusLine.textContent = text;
  statusLine.className = isError ? "error" : "";
}

function show(event, data) {
  if (event === "tool_call") {
    const item = document.createElement("li");
    item.className = "call";
    item.textContent = "-> " + data.name + " " + JSON.stringify(data.input);
    calls.append(item);
  } else if (event === "tool_result") {
    const item = document.createElement("li");
    item.className = "result";
    item.textContent = data.summary;
    calls.append(item);
  } else if (event === "text") {
    answer.textContent += data.text;
  } else if (event === "tools_ignored") {
    notice.textContent = data.message;
  } else if (event === "final") {
    say("done: " + data.stopped + " after " + data.turns + " turn(s), by " + data.answered_by,
        data.stopped !== "answered");
  } else if (event === "error") {
    say(data.error + ": " + data.message, true);
  }
}

async function ask(question) {
  calls.replaceChildren();
  answer.textContent = "";
  notice.textContent = "";
  say("asking...", false);
  const response = await fetch("/ask/stream", {
    method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({question}),
  });
  if (!response.ok) {
    const failure = await response.json();
    say(failure.error + ": " + failure.message, true);
    return;
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffered += value;
    let end;
    while ((end = buffered.indexOf("\\n\\n")) >= 0) {
      const frame = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      const event = /^event: (.*)$/m.exec(frame);
      const data = /^data: (.*)$/m.exec(frame);
      if (event && data) show(event[1], JSON.parse(data[1]));
    }
  }
}

form.addEventListener("submit", (submitted) => {
  submitted.preventDefault();
  const button = document.getElementById("send");
  button.disabled = true;
  ask(document.getElementById("question").value)
    .catch((failure) => say("the request failed: " + failure, true))
    .finally(() => { button.disabled = false; });
});
</script>
</body>
</html>
"""
"""The page ``GET /`` serves: a question box that posts to ``/ask/stream`` and
draws each tool call, each result and the answer's text as their events arrive,
a far end's ignored tools as a notice, and who answered with the last line."""


async def page(request: web.Request) -> web.StreamResponse:
    return web.Response(text=PAGE, content_type="text/html")


def make_app(
    open_provider: Callable[[], Awaitable[Provider]] = configured_provider,
    toolset: tools.Toolset | None = None,
) -> web.Application:
    """The app; ``open_provider`` builds the provider it holds (a test hands its
    own). When it raises :class:`NoModel` the reason is logged once, here, and
    both routes answer 503 with its public part (:attr:`NoModel.public`)."""
    app = web.Application(middlewares=[errors_as_json, guarded], client_max_size=MAX_BODY_BYTES)
    app[TOOLSET] = toolset if toolset is not None else tools.Toolset(kb.sample())

    async def hold_provider(app: web.Application) -> AsyncIterator[None]:
        try:
            model = await open_provider()
        except NoModel as exc:
            log.warning(
                "%s; /ask and /ask/stream answer 503 until it is fixed and this restarts", exc
            )
            app[NO_MODEL] = exc
            yield
            return
        async with model:
            app[PROVIDER] = model
            app[ANSWERED_BY] = answered_by(model)
            yield

    app.cleanup_ctx.append(hold_provider)
    app.router.add_get("/", page)
    app.router.add_post("/ask", ask)
    app.router.add_post("/ask/stream", ask_stream)
    return app


class Guard:
    """Bounds what clients can hold of the server, as a front proxy would: at most
    ``max_connections`` open, and each must send a request's head within
    ``read_timeout_s`` (its body is bounded as long by :func:`guarded`), and after
    an answer its next head within as long again.

    A connection past the cap takes the place of the oldest one not running a
    request: one still sending its head or its body, or idle between requests.
    When every open connection is running a request (all are real ones), the new
    one is closed at once. So connections that send slow heads, drip their
    bodies or hold a kept-alive connection idle, however many, hold no more than
    the cap's descriptors and never starve a request that sends itself whole."""

    def __init__(self, max_connections: int, read_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.read_timeout_s = read_timeout_s
        self.open: dict[asyncio.BaseTransport, GuardedConnection] = {}
        self.waiting: dict[GuardedConnection, None] = {}  # not running a request, oldest first

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: GuardedConnection(factory(), self)


GUARD = web.AppKey("guard", Guard)


class GuardedConnection(asyncio.Protocol):
    """One connection under a :class:`Guard`, passing everything to aiohttp's own.

    It is waiting (may give way to a new connection) from when it opens until
    :func:`guarded` has read a whole request, and again from when that request
    is answered; a timer bounds each head while it waits."""

    def __init__(self, inner: asyncio.Protocol, guard: Guard) -> None:
        self.inner = inner
        self.guard = guard
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.served = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream server's transport; uvloop's is one without subclassing asyncio's
        self.transport = cast(asyncio.Transport, transport)
        guard = self.guard
        if len(guard.open) >= guard.max_connections:
            oldest = next(iter(guard.waiting), None)
            if oldest is None:
                self.transport.abort()  # every open connection is running a request
                return
            oldest.drop()
        guard.open[transport] = self
        self.served = True
        self.inner.connection_made(transport)
        self.idle()

    def stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def idle(self) -> None:
        """Waiting for a request's head: from the open, and after each answer."""
        self.stop_timer()
        if self.transport is None or self.guard.open.get(self.transport) is not self:
            return  # closed while its request ran
        self.guard.waiting.pop(self, None)
        self.guard.waiting[self] = None  # the newest
        self.timer = asyncio.get_running_loop().call_later(self.guard.read_timeout_s, self.drop)

    def reading(self) -> None:
        """The head is in: :func:`guarded` bounds the body's read."""
        self.stop_timer()

    def running(self) -> None:
        """A whole request is in: it no longer gives way to a new connection."""
        self.stop_timer()
        self.guard.waiting.pop(self, None)

    def drop(self) -> None:
        """Close a connection that is not running a request."""
        self.forget()
        if self.transport is not None:
            self.transport.abort()

    def forget(self) -> None:
        self.stop_timer()
        self.guard.waiting.pop(self, None)
        if self.transport is not None:
            self.guard.open.pop(self.transport, None)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.served else None

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.served:
            self.forget()
            self.inner.connection_lost(exc)


def connection_cap() -> int:
    """:data:`MAX_CONNECTIONS`, or half the descriptor limit when that is lower
    (the provider's own connections and the process need the rest)."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return MAX_CONNECTIONS
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, soft // 2))


async def start(
    app: web.Application,
    host: str,
    port: int,
    *,
    max_connections: int | None = None,
    read_timeout_s: float = READ_TIMEOUT_S,
) -> tuple[web.AppRunner, asyncio.Server]:
    """``app`` listening on ``host:port`` under a :class:`Guard`; the caller closes
    the server, then cleans the runner up."""
    guard = Guard(max_connections or connection_cap(), read_timeout_s)
    app[GUARD] = guard
    # the guard closes an idle kept-alive connection; aiohttp's own timer is no sooner
    runner = web.AppRunner(app, handler_cancellation=True, keepalive_timeout=read_timeout_s)
    await runner.setup()
    handlers = runner.server
    assert handlers is not None  # set up above
    try:
        server = await asyncio.get_running_loop().create_server(guard.wrap(handlers), host, port)
    except BaseException:
        await runner.cleanup()
        raise
    return runner, server


async def serve(
    host: str, port: int, max_connections: int | None = None, read_timeout_s: float = READ_TIMEOUT_S
) -> None:
    """Serve until cancelled (Ctrl-C), then close the provider."""
    runner, server = await start(
        make_app(), host, port, max_connections=max_connections, read_timeout_s=read_timeout_s
    )
    try:
        bound_host, bound_port = server.sockets[0].getsockname()[:2]
        print(f"listening on http://{bound_host}:{bound_port}", flush=True)
        app = runner.app
        if ANSWERED_BY in app:
            print(f"answering: {app[ANSWERED_BY]}", flush=True)
            stub = isinstance(app[PROVIDER], StubProvider)
            dropped = None if stub else await providers.tools_dropped()
            if dropped is not None:  # said once, as `vaelii-llm ask` does; each answer shows it too
                print(f"no-tools: {dropped}", flush=True)
        else:  # its reason was logged as the provider was opened
            print(f"answering: no model, so every question is a 503: {app[NO_MODEL]}", flush=True)
        await asyncio.Event().wait()
    finally:
        server.close()
        await runner.cleanup()
        print("provider closed", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Answer questions over the KB on HTTP.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="0 takes a free port")
    parser.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help=f"connections open at once (default {MAX_CONNECTIONS}, or half the descriptor limit)",
    )
    parser.add_argument(
        "--read-timeout",
        type=float,
        default=READ_TIMEOUT_S,
        help="seconds a connection has to send a request's head, then its body "
        f"(default {READ_TIMEOUT_S:g})",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    try:
        asyncio.run(serve(args.host, args.port, args.max_connections, args.read_timeout))
    except KeyboardInterrupt:  # Ctrl-C: "provider closed" was its one line
        return 130  # the shell's status for SIGINT, as every example and vaelii-llm exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
