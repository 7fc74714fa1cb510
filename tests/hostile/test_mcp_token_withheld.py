"""An MCP server over HTTP that answers ``initialize`` with a 200 whose body is
no JSON-RPC and echoes the request's ``Authorization`` (#58).

The official ``mcp`` client refuses the body with pydantic's words, which
quote it (a long value cut to its opening and its end around ``...``): the
token was in the :class:`McpServerError` text and in the traceback of an
ERROR record of ``mcp.client.streamable_http``. Neither holds the token now,
nor the opening or the ending a cut leaves of it.
"""

from __future__ import annotations

import logging
import traceback

import pytest
from aiohttp import web

from tests.support.loopback import serve
from vaelii_llm.integrations.mcp_client import McpServerError
from vaelii_llm.integrations.mcp_client import McpToolset


def echoing() -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"echo": request.headers.get("Authorization", "")})

    app = web.Application()
    app.router.add_route("*", "/mcp", handle)
    return app


@pytest.mark.parametrize(
    "token",
    ["tok-SECRET-0123456789abcdef", "tok-SECRET-" + "0123456789abcdef" * 8],
    ids=["short", "long-cut-by-the-parser"],
)
async def test_a_token_echoed_in_a_body_that_is_no_json_rpc_is_withheld(
    token: str, caplog: pytest.LogCaptureFixture
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    pieces = [token, token[:8], token[-8:]]  # whole, or what a cut leaves of it
    with caplog.at_level(logging.DEBUG):
        async with serve(echoing()) as url:
            with pytest.raises(McpServerError) as refused:
                async with McpToolset.http(url + "/mcp", headers=headers, start_timeout=30):
                    pass
    said = str(refused.value)
    assert "could not be reached" in said
    assert "<Authorization withheld>" in said
    assert not [piece for piece in pieces if piece in said], said
    errors = [r for r in caplog.records if r.name == "mcp.client.streamable_http"]
    assert [r.levelno for r in errors if r.levelno >= logging.ERROR]  # logged, and:
    for record in caplog.records:
        shown = record.getMessage() + (record.exc_text or "")
        if record.exc_info and record.exc_info[1] is not None:
            shown += "".join(traceback.format_exception(record.exc_info[1]))
        assert not [piece for piece in pieces if piece in shown], (record.name, shown)
    assert not [piece for piece in pieces if piece in caplog.text]
    assert "Traceback" in caplog.text  # the traceback is still told, withheld
