"""Record a real llama-server's answers as fixtures for the hermetic suite.

``python tests/record_llama_server.py`` starts the ``real`` lane's server
(``tests/llama_server.py``), sends each case of :data:`CASES` as raw HTTP on
both wires, and writes what came back, byte for byte, with the server's
version and command, to ``tests/recorded/llama_server.json``.
``tests/test_recorded_real.py`` replays it on loopback. Run it again when the
pinned server version changes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).parent))
from llama_server import LlamaServer, built

OUT = Path(__file__).parent / "recorded" / "llama_server.json"
PNG = base64.b64encode((Path(__file__).parent.parent / "examples" / "red_square.png").read_bytes())

USER = [{"role": "user", "content": "Name three colours."}]
IMAGE = [
    {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + PNG.decode()}},
            {"type": "text", "text": "What is this?"},
        ],
    }
]
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "legs": {"type": "integer"}},
    "required": ["name", "legs"],
    "additionalProperties": False,
}

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "openai-text": ("/v1/chat/completions", {"max_tokens": 40, "messages": USER}),
    "openai-max-tokens": ("/v1/chat/completions", {"max_tokens": 5, "messages": USER}),
    "openai-format": (
        "/v1/chat/completions",
        {
            "max_tokens": 60,
            "messages": [{"role": "user", "content": "Describe a spider as JSON."}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "animal", "schema": SCHEMA},
            },
        },
    ),
    "openai-image": ("/v1/chat/completions", {"max_tokens": 20, "messages": IMAGE}),
    "anthropic-text": ("/v1/messages", {"max_tokens": 40, "messages": USER}),
    "anthropic-max-tokens": ("/v1/messages", {"max_tokens": 5, "messages": USER}),
}


async def main() -> None:
    binary, model = await asyncio.to_thread(built)
    version = (
        await asyncio.to_thread(
            subprocess.run, [str(binary), "--version"], capture_output=True, text=True, check=False
        )
    ).stderr.strip()
    recorded: dict[str, Any] = {
        "server": version.splitlines()[0],
        "model": model.name,
        "command": "llama-server -m MODEL --temp 0 --parallel 2 -t 1 -c 4096 --jinja --no-webui",
        "cases": {},
    }
    closing = aiohttp.TCPConnector(force_close=True)  # one connection per answer
    async with (
        LlamaServer(parallel=2) as server,
        aiohttp.ClientSession(connector=closing) as session,
    ):
        for name, (path, body) in CASES.items():
            for stream in (False, True):
                sent = {"model": "smollm2", **body, "stream": stream}
                if stream and path == "/v1/chat/completions":
                    sent["stream_options"] = {"include_usage": True}  # as our codec asks
                print(name, "stream" if stream else "whole", flush=True)
                async with session.post(server.base + path, json=sent) as answer:
                    raw = await answer.read()
                    recorded["cases"][f"{name}{'-stream' if stream else ''}"] = {
                        "path": path,
                        "request": sent,
                        "status": answer.status,
                        "content_type": answer.headers.get("Content-Type", ""),
                        "body": raw.decode(),
                    }
    OUT.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT} ({len(recorded['cases'])} answers from {recorded['server']})")


if __name__ == "__main__":
    asyncio.run(main())
