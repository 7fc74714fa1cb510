"""An MCP server, written with the ``mcp`` package, whose tool list is hostile.

``python tests/support/mcp_hostile_server.py names`` lists tools named ``''``, ``'a b'``,
with a newline, ``../../etc``, 10,000 characters, an RTL override and a Cyrillic
look-alike of ``kb_query``, plus ``echo``; every call answers the place in that
list of the name it was called by (``called #3``). ``collide NAME`` lists
``'a b'`` and ``NAME``. ``schema [CHARS]`` lists one tool whose input schema is
10 MB (or ``CHARS``).
``http`` serves ``names`` over streamable HTTP on a free loopback port, printing
``URL <url>`` on stdout, and echoes each request's ``Authorization`` header back
in an ``X-Echo`` response header.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server

HOSTILE_NAMES = [
    "",
    "a b",
    "new\nline",
    "../../etc",
    "x" * 10_000,
    "\u202ekb_query",
    "kb_qu\u0435ry",  # a Cyrillic е
    "echo",
]
HUGE_SCHEMA_CHARS = 10 * 1024 * 1024

_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


def _tools(mode: str, argv: list[str]) -> list[types.Tool]:
    if mode == "schema":
        chars = int(argv[0]) if argv else HUGE_SCHEMA_CHARS
        huge = {"type": "object", "description": "x" * chars, "properties": {}}
        return [types.Tool(name="vast", description="Has a vast schema.", input_schema=huge)]
    names = ["a b", argv[0]] if mode == "collide" else HOSTILE_NAMES
    return [
        types.Tool(name=name, description="Says its name.", input_schema=_OBJECT) for name in names
    ]


def build(mode: str, argv: list[str]) -> Server[Any]:
    listed = _tools(mode, argv)

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        names = [tool.name for tool in listed]
        said = f"called #{names.index(params.name)}" if params.name in names else "no such tool"
        return types.CallToolResult(content=[types.TextContent(text=said)])

    return Server("hostile", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


def _echoing(app: Any) -> Any:
    """``app`` answering each request's ``Authorization`` in an ``X-Echo`` header."""

    async def echoing(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        auth = dict(scope["headers"]).get(b"authorization", b"")

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-echo", auth)]}
            await send(message)

        await app(scope, receive, sending)

    return echoing


async def _stdio(mode: str, argv: list[str]) -> None:
    from mcp.server.stdio import stdio_server

    server = build(mode, argv)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def _http() -> None:
    import uvicorn

    app = _echoing(build("names", []).streamable_http_app(host="127.0.0.1"))
    sock = socket.create_server(("127.0.0.1", 0))
    print(f"URL http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    mode, rest = sys.argv[1], sys.argv[2:]
    asyncio.run(_http() if mode == "http" else _stdio(mode, rest))
