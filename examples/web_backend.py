"""An async web backend: an aiohttp.web app that answers questions over the KB.

Run ``python examples/web_backend.py [--host 127.0.0.1] --port 8080`` (``--port 0``
takes a free port; the address is printed), then::

    curl -s localhost:8080/ask -d '{"question": "Who is Miss Muffet afraid of?"}'
    curl -sN localhost:8080/ask/stream -d '{"question": "Who is Miss Muffet afraid of?"}'

What it shows:

* one provider for the app's lifetime, opened on startup and closed on cleanup
  (``cleanup_ctx``), shared by every request: the backends are safe to share
  within one event loop, and a slow turn holds only its own request;
* ``POST /ask`` with ``{"question": str, "timeout_ms": int?}`` runs the tool loop
  (:func:`vaelii_llm.agent.run`) and answers ``{"answer", "tool_calls",
  "stop_reason", "usage"}`` (with ``stopped`` and ``turns``);
* ``POST /ask/stream`` answers ``text/event-stream``: a ``tool_call`` and a
  ``tool_result`` event per call, a ``text`` event per delta, then ``final``
  (the same object ``/ask`` answers), or ``error`` if the model fails midway;
* errors as JSON, never a traceback page: a body that is not a JSON object
  with a string ``question`` is 400; a turn over its ``timeout_ms`` budget is
  504 ``{"error": "llm-timeout"}``; any other refusal from the model is 502
  with its type; anything else is 500 ``{"error": "internal"}``.

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
from typing import Annotated, Any

import msgspec
from aiohttp import web

from vaelii_llm import Provider, Request, agent, errors, kb, providers, tools

log = logging.getLogger("web_backend")

STUB_ANSWER = (
    "No model is configured: set VAELII_LLM_PROVIDER and restart "
    "(`vaelii-llm status` says which backend answers)."
)
DEFAULT_TIMEOUT_MS = 60_000

PROVIDER = web.AppKey("provider", Provider)
TOOLSET = web.AppKey("toolset", tools.Toolset)


class AskBody(msgspec.Struct, frozen=True):
    """What both routes accept; anything else is a 400."""

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
        return error_body(llm_status(exc), exc.type, str(exc))
    except web.HTTPException as exc:  # aiohttp's own 404, 405, 413...
        return error_body(exc.status, "http", exc.reason)
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_body(500, "internal", "the server failed; the log has the details")


class BadBody(Exception):
    """The request body is not what the routes take."""


async def read_body(request: web.Request) -> AskBody:
    try:
        return ASK_DECODER.decode(await request.read())
    except msgspec.DecodeError as exc:  # a ValidationError is a DecodeError too
        raise BadBody(str(exc)) from None


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
            status = llm_status(exc)
            await response.write(
                sse("error", {"error": exc.type, "message": str(exc), "status": status})
            )
    await response.write_eof()
    return response


def make_app(
    open_provider: Callable[[], Awaitable[Provider]] = configured_provider,
    toolset: tools.Toolset | None = None,
) -> web.Application:
    """The app; ``open_provider`` builds the provider it holds (a test hands its own)."""
    app = web.Application(middlewares=[errors_as_json], client_max_size=64 * 1024)
    app[TOOLSET] = toolset if toolset is not None else tools.Toolset(kb.sample())

    async def hold_provider(app: web.Application) -> AsyncIterator[None]:
        async with await open_provider() as model:
            app[PROVIDER] = model
            yield

    app.cleanup_ctx.append(hold_provider)
    app.router.add_post("/ask", ask)
    app.router.add_post("/ask/stream", ask_stream)
    return app


async def serve(host: str, port: int) -> None:
    """Serve until cancelled (Ctrl-C), then close the provider."""
    runner = web.AppRunner(make_app(), handler_cancellation=True)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        print(f"listening on http://{bound_host}:{bound_port}", flush=True)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        print("provider closed", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Answer questions over the KB on HTTP.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="0 takes a free port")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
