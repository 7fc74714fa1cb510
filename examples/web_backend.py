"""An async web backend: an aiohttp.web app that answers questions over the KB.

Run ``python examples/web_backend.py [--host 127.0.0.1] --port 8080`` (``--port 0``
takes a free port; the address is printed), then open http://localhost:8080/ in a
browser: type a question and watch the tool calls and the answer stream in. Or::

    curl -s localhost:8080/ask -d '{"question": "Who is Miss Muffet afraid of?"}'
    curl -sN localhost:8080/ask/stream -d '{"question": "Who is Miss Muffet afraid of?"}'

What it shows:

* ``GET /``: one page, served by the app itself (no build step, no external
  asset), that posts to ``/ask/stream`` and draws each event as it arrives;

* one provider for the app's lifetime, opened on startup and closed on cleanup
  (``cleanup_ctx``), shared by every request: the backends are safe to share
  within one event loop, and a slow turn holds only its own request;
* ``POST /ask`` with ``{"question": str, "timeout_ms": int?}`` runs the tool loop
  (:func:`vaelii_llm.agent.run`) and answers ``{"answer", "tool_calls",
  "stop_reason", "usage"}`` (with ``stopped`` and ``turns``);
* ``POST /ask/stream`` answers ``text/event-stream``: a ``tool_call`` and a
  ``tool_result`` event per call (before them, a ``tool_input`` event per
  piece of the call's arguments as the model writes them, on a backend that
  streams them), a ``text`` event per delta, then ``final``
  (the same object ``/ask`` answers), or ``error`` if the model fails midway;
* errors as JSON, never a traceback page: a body that is not exactly
  ``{"question": str, "timeout_ms": int?}`` (empty, not JSON, a missing
  ``question``, a field it does not take, nesting of any depth where a string
  or a number goes) is 400 saying which; a turn over its ``timeout_ms`` budget
  is 504 ``{"error": "llm-timeout"}``; any other refusal from the model is 502
  with its type; anything else is 500 ``{"error": "internal"}``. A 502 or 504
  says the refusal's type and a short reason; the refusal's whole message
  (which names the upstream address) goes to the server's log, not to a browser;
* bounds a client cannot lift: a body over 64 KiB is 413; a connection must
  send its first request head within ``--head-timeout`` seconds and an idle
  keep-alive one is closed after :data:`KEEPALIVE_S`; at most
  ``--max-connections`` are open at once (by default :data:`MAX_CONNECTIONS`,
  or half the process's descriptor limit if that is lower), and a new one past
  the cap takes the place of the oldest still sending its head, so a crowd of
  slow-header connections cannot starve a real request (:class:`Guard`).

With nothing configured the scripted stub answers every question with a line
saying so. Set ``VAELII_LLM_PROVIDER=ollama`` (an Ollama at
``VAELII_OLLAMA_HOST``, a model with tools in ``VAELII_OLLAMA_MODEL``) or
``anthropic`` (``ANTHROPIC_API_KEY``) before starting it to serve a real model.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Annotated, Any, Final, cast

import msgspec
from aiohttp import web

from vaelii_llm import Provider, Request, agent, errors, kb, providers, tools

log = logging.getLogger("web_backend")

STUB_ANSWER = (
    "No model is configured: set VAELII_LLM_PROVIDER and restart "
    "(`vaelii-llm status` says which backend answers)."
)
DEFAULT_TIMEOUT_MS = 60_000
MAX_BODY_BYTES: Final = 64 * 1024
HEAD_TIMEOUT_S: Final = 10.0
"""How long a new connection may take to send its first request head."""
KEEPALIVE_S: Final = 15.0
"""How long an idle keep-alive connection is kept (aiohttp closes it, a half-sent
head included)."""
MAX_CONNECTIONS: Final = 1000
"""The most connections served at once, below the usual 1,024-descriptor limit."""

PROVIDER = web.AppKey("provider", Provider)
TOOLSET = web.AppKey("toolset", tools.Toolset)


class AskBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What both routes accept; anything else (an unknown field included) is a 400."""

    question: str
    timeout_ms: Annotated[int, msgspec.Meta(ge=1, le=600_000)] = DEFAULT_TIMEOUT_MS


ASK_DECODER = msgspec.json.Decoder(AskBody)


async def configured_provider() -> Provider:
    """The configured backend, or the stub with a line saying none is."""
    return await providers.provider(stub={"default": STUB_ANSWER})


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
    except errors.LLMError as exc:
        failure = llm_failure(exc)
        return error_body(failure["status"], failure["error"], failure["message"])
    except web.HTTPException as exc:  # aiohttp's own 404, 405, 413...
        return error_body(exc.status, "http", exc.reason)
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_body(500, "internal", "the server failed; the log has the details")


class BadBody(Exception):
    """The request body is not what the routes take."""


BODY_SHAPE = '{"question": str, "timeout_ms": int?}'


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
    return agent.request(body.question, app[TOOLSET], timeout_ms=body.timeout_ms)


async def ask(request: web.Request) -> web.StreamResponse:
    body = await read_body(request)
    app = request.app
    result = await agent.run(app[PROVIDER], app[TOOLSET], first_request(app, body))
    return web.json_response(result.summary())


def sse(event: str, data: Any) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + msgspec.json.encode(data) + b"\n\n"


async def ask_stream(request: web.Request) -> web.StreamResponse:
    """Events as the loop runs. The head is sent with the first event, so a
    model that fails before saying anything still gets its 502 or 504."""
    body = await read_body(request)
    app = request.app
    items = agent.events(app[PROVIDER], app[TOOLSET], first_request(app, body))
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    async with aclosing(items):
        try:
            async for item in items:
                if not response.prepared:
                    await response.prepare(request)
                if isinstance(item, agent.AgentResult):
                    await response.write(sse("final", item.summary()))
                else:
                    await response.write(sse(item.type, item))
        except errors.LLMError as exc:
            if not response.prepared:
                raise  # nothing sent yet: the middleware answers 502 or 504
            await response.write(sse("error", llm_failure(exc)))
    await response.write_eof()
    return response


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
<p id="status"></p>
<script>
"use strict";
const form = document.getElementById("ask");
const calls = document.getElementById("calls");
const answer = document.getElementById("answer");
const statusLine = document.getElementById("status");

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
  } else if (event === "final") {
    say("done: " + data.stopped + " after " + data.turns + " turn(s)", data.stopped !== "answered");
  } else if (event === "error") {
    say(data.error + ": " + data.message, true);
  }
}

async function ask(question) {
  calls.replaceChildren();
  answer.textContent = "";
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
draws each tool call, each result and the answer's text as their events arrive."""


async def page(request: web.Request) -> web.StreamResponse:
    return web.Response(text=PAGE, content_type="text/html")


def make_app(
    open_provider: Callable[[], Awaitable[Provider]] = configured_provider,
    toolset: tools.Toolset | None = None,
) -> web.Application:
    """The app; ``open_provider`` builds the provider it holds (a test hands its own)."""
    app = web.Application(middlewares=[errors_as_json], client_max_size=MAX_BODY_BYTES)
    app[TOOLSET] = toolset if toolset is not None else tools.Toolset(kb.sample())

    async def hold_provider(app: web.Application) -> AsyncIterator[None]:
        async with await open_provider() as model:
            app[PROVIDER] = model
            yield

    app.cleanup_ctx.append(hold_provider)
    app.router.add_get("/", page)
    app.router.add_post("/ask", ask)
    app.router.add_post("/ask/stream", ask_stream)
    return app


class Guard:
    """Bounds what clients can hold of the server, as a front proxy would: at most
    ``max_connections`` open, and each must send its first request head within
    ``head_timeout_s`` (aiohttp's keep-alive timeout bounds the heads after it).

    A connection past the cap takes the place of the oldest one still sending its
    head; when every open connection has sent one (all are real requests), the new
    one is closed at once. So slow-header connections, however many, hold no more
    than the cap's descriptors and never starve a request that sends its head."""

    def __init__(self, max_connections: int, head_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.head_timeout_s = head_timeout_s
        self.open: set[GuardedConnection] = set()
        self.waiting: dict[GuardedConnection, None] = {}  # oldest first

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: GuardedConnection(factory(), self)


class GuardedConnection(asyncio.Protocol):
    """One connection under a :class:`Guard`, passing everything to aiohttp's own."""

    def __init__(self, inner: asyncio.Protocol, guard: Guard) -> None:
        self.inner = inner
        self.guard = guard
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.tail = b""
        self.served = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream server's transport; uvloop's is one without subclassing asyncio's
        self.transport = cast(asyncio.Transport, transport)
        guard = self.guard
        if len(guard.open) >= guard.max_connections:
            oldest = next(iter(guard.waiting), None)
            if oldest is None:
                self.transport.abort()  # every open connection is a real request
                return
            oldest.drop()
        guard.open.add(self)
        guard.waiting[self] = None
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(guard.head_timeout_s, self.drop)
        self.served = True
        self.inner.connection_made(transport)

    def head_sent(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.guard.waiting.pop(self, None)

    def drop(self) -> None:
        """Close a connection that is still sending its head."""
        self.head_sent()
        self.guard.open.discard(self)
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.timer is not None:
            seen = self.tail + data
            if b"\r\n\r\n" in seen:
                self.head_sent()
            else:
                self.tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.served else None

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.head_sent()
        self.guard.open.discard(self)
        if self.served:
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
    head_timeout_s: float = HEAD_TIMEOUT_S,
) -> tuple[web.AppRunner, asyncio.Server]:
    """``app`` listening on ``host:port`` under a :class:`Guard`; the caller closes
    the server, then cleans the runner up."""
    runner = web.AppRunner(app, handler_cancellation=True, keepalive_timeout=KEEPALIVE_S)
    await runner.setup()
    guard = Guard(max_connections or connection_cap(), head_timeout_s)
    handlers = runner.server
    assert handlers is not None  # set up above
    try:
        server = await asyncio.get_running_loop().create_server(guard.wrap(handlers), host, port)
    except BaseException:
        await runner.cleanup()
        raise
    return runner, server


async def serve(
    host: str, port: int, max_connections: int | None = None, head_timeout_s: float = HEAD_TIMEOUT_S
) -> None:
    """Serve until cancelled (Ctrl-C), then close the provider."""
    runner, server = await start(
        make_app(), host, port, max_connections=max_connections, head_timeout_s=head_timeout_s
    )
    try:
        bound_host, bound_port = server.sockets[0].getsockname()[:2]
        print(f"listening on http://{bound_host}:{bound_port}", flush=True)
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
        "--head-timeout",
        type=float,
        default=HEAD_TIMEOUT_S,
        help=f"seconds a connection has to send its request head (default {HEAD_TIMEOUT_S:g})",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.max_connections, args.head_timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
