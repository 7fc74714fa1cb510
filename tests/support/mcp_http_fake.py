"""A hostile MCP server over streamable HTTP, written by hand on aiohttp: JSON
answers only, one request at a time.

``app(pages=..., page_delay=..., result_bytes=...)``: ``tools/list`` answers
``pages`` pages (one tool each), each after ``page_delay`` seconds;
``tools/call`` answers a JSON body of ``result_bytes`` (its text made as it is
sent, never held whole; its length announced, or sent chunked). Every answer
echoes the request's ``Authorization`` in an ``X-Echo`` header.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

CHUNK = b"x" * 65536


def app(
    *, pages: int = 1, page_delay: float = 0.0, result_bytes: int = 0, announced: bool = True
) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        echo = {"X-Echo": request.headers.get("Authorization", "")}
        if request.method != "POST":
            return web.Response(status=405, headers=echo)
        message = await request.json()
        method, id_ = message.get("method"), message.get("id")
        if id_ is None:
            return web.Response(status=202, headers=echo)
        result: dict[str, Any]
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake", "version": "1"},
            }
        elif method == "tools/list":
            await asyncio.sleep(page_delay)
            page = int((message.get("params") or {}).get("cursor") or 0)
            result = {"tools": [{"name": f"t{page}", "inputSchema": {"type": "object"}}]}
            if page + 1 < pages:
                result["nextCursor"] = str(page + 1)
        elif method == "tools/call" and result_bytes:
            return await huge(request, id_, echo)
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "ok"}]}
        else:
            error = {"code": -32601, "message": str(method)}
            return web.json_response({"jsonrpc": "2.0", "id": id_, "error": error}, headers=echo)
        return web.json_response({"jsonrpc": "2.0", "id": id_, "result": result}, headers=echo)

    async def huge(request: web.Request, id_: Any, echo: dict[str, str]) -> web.StreamResponse:
        opening = b'{"jsonrpc": "2.0", "id": %s, "result": {"content": [{"type": "text", "text": "'
        opening %= json.dumps(id_).encode()
        closing = b'"}]}}'
        answer = web.StreamResponse(headers={"Content-Type": "application/json", **echo})
        if announced:  # else sent chunked, its size unsaid
            answer.content_length = len(opening) + result_bytes + len(closing)
        await answer.prepare(request)
        await answer.write(opening)
        for _ in range(result_bytes // len(CHUNK)):
            await answer.write(CHUNK)
        await answer.write(b"x" * (result_bytes % len(CHUNK)) + closing)
        return answer

    served = web.Application()
    served.router.add_route("*", "/mcp", handle)
    return served
