"""A small MCP server, written with the ``mcp`` package, whose tools misbehave on purpose.

``python tests/support/mcp_tools_server.py`` serves over stdio; ``--http`` serves
streamable HTTP on a free loopback port and prints ``URL <url>`` on stdout.
Tools: ``echo`` (text), ``picture`` (an image), ``fail`` (an ``isError``
result), ``boom`` (a protocol error), ``hang`` (never answers), ``huge``
(a megabyte of text), ``die`` (the process exits mid-call) and ``pid`` (its process id).
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import sys
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

HUGE_CHARS = 1024 * 1024
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()

_OBJECT: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
TOOLS = [
    types.Tool(
        name="echo",
        description="Says the text back.",
        input_schema={
            "type": "object",
            "required": ["text"],
            "properties": {"text": {"type": "string", "description": "what to say"}},
        },
    ),
    *(
        types.Tool(name=name, description=description, input_schema=_OBJECT)
        for name, description in (
            ("picture", "Answers a small PNG image."),
            ("fail", "Fails, as a tool result with isError."),
            ("boom", "Fails with a protocol error."),
            ("hang", "Never answers."),
            ("huge", "Answers a megabyte of text."),
            ("die", "Exits the server process mid-call."),
            ("pid", "Answers the server's process id."),
        )
    ),
]


def build() -> Server[Any]:
    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        name = params.name
        if name == "echo":
            return types.CallToolResult(content=[types.TextContent(text=str(args.get("text")))])
        if name == "picture":
            return types.CallToolResult(
                content=[
                    types.TextContent(text="a picture:"),
                    types.ImageContent(data=PNG, mime_type="image/png"),
                ]
            )
        if name == "fail":
            return types.CallToolResult(
                content=[types.TextContent(text="no-such-file: /nowhere")], is_error=True
            )
        if name == "boom":
            raise MCPError(code=types.INVALID_PARAMS, message="boom refuses every call")
        if name == "hang":
            await asyncio.Event().wait()
        if name == "huge":
            return types.CallToolResult(content=[types.TextContent(text="x" * HUGE_CHARS)])
        if name == "die":
            os._exit(3)
        if name == "pid":
            return types.CallToolResult(content=[types.TextContent(text=str(os.getpid()))])
        raise MCPError(code=types.METHOD_NOT_FOUND, message=f"no tool {name}")

    return Server("misbehaving", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


async def _stdio() -> None:
    from mcp.server.stdio import stdio_server

    server = build()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def _http() -> None:
    import uvicorn

    app = build().streamable_http_app(host="127.0.0.1")
    sock = socket.create_server(("127.0.0.1", 0))
    print(f"URL http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(_http() if "--http" in sys.argv else _stdio())
