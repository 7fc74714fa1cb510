"""An MCP server written by hand over stdio (one JSON-RPC message a line), for
what no server library would send.

``python tests/support/mcp_raw_server.py MODE [ARG]`` answers ``initialize``, lists one
tool, ``echo``, and answers its calls, except as ``MODE`` says:
``endless_line`` answers a call with a line that never ends; ``page_1m`` lists
a page of a million tools on one line; ``helper PIDFILE`` starts a helper
process (in its own process group, as a server's helpers are) and writes the
helper's pid to ``PIDFILE``; ``plain`` misbehaves in no way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

TOOL = {"name": "echo", "description": "Says ok.", "inputSchema": {"type": "object"}}
CHUNK = b"x" * 65536


def send(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


def endless(opening: bytes) -> None:
    out = sys.stdout.buffer
    out.write(opening)
    while True:  # until the client stops reading and the pipe breaks
        out.write(CHUNK)
        out.flush()


def page_1m(id_: Any) -> None:
    out = sys.stdout.buffer
    out.write(b'{"jsonrpc": "2.0", "id": %s, "result": {"tools": [' % json.dumps(id_).encode())
    tools = (b'{"name": "t%d", "inputSchema": {"type": "object"}}' % n for n in range(1_000_000))
    batch: list[bytes] = []
    for n, tool in enumerate(tools):
        batch.append(tool)
        if len(batch) == 10_000:
            out.write((b", " if n >= 10_000 else b"") + b", ".join(batch))
            batch = []
    out.write(b"]}}\n")
    out.flush()


def main(mode: str, argv: list[str]) -> None:
    if mode == "helper":
        helper = subprocess.Popen(["sleep", "300"])
        with open(argv[0], "w") as file:
            file.write(str(helper.pid))
    for line in sys.stdin.buffer:
        message = json.loads(line)
        method, id_ = message.get("method"), message.get("id")
        if id_ is None:
            continue  # a notification
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": id_, "result": result})
        elif method == "tools/list" and mode == "page_1m":
            page_1m(id_)
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": id_, "result": {"tools": [TOOL]}})
        elif method == "tools/call" and mode == "endless_line":
            opening = {"jsonrpc": "2.0", "id": id_, "result": {"content": [{"type": "text"}]}}
            endless(json.dumps(opening).encode()[:-4] + b', "text": "')
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "ok"}]}
            send({"jsonrpc": "2.0", "id": id_, "result": result})
        else:
            send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": method}})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
