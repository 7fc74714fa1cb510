"""Record a real llama-server's answers as fixtures for the hermetic suite.

``python tests/real/record_llama_server.py`` starts the ``real`` lane's server
(``tests/real/llama_server.py``), sends each case of :data:`CASES` as raw HTTP on
each wire it serves (Chat Completions, the Messages API, Responses; the
tool-call cases of :data:`TOOL_CASES` on a second server with the tool
template), and writes what came back, byte for byte, with the server's
version and command, to ``tests/real/recorded/llama_server.json``.
``tests/real/test_recorded_real.py`` replays it on loopback. Run it again when the
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
from llama_server import TOOL_TEMPLATE
from llama_server import WORKED
from llama_server import LlamaServer
from llama_server import built

from vaelii_llm import kb
from vaelii_llm import tools

OUT = Path(__file__).parent / "recorded" / "llama_server.json"
PNG = base64.b64encode(
    (Path(__file__).resolve().parents[2] / "examples" / "red_square.png").read_bytes()
)

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

TOOL = tools.Toolset(kb.sample()).schema(tools.op_of("kb_types_of"))
QUESTION = "What is Muffet?"


def _openai_exchanges() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for n, (term, kinds, kind) in enumerate(WORKED, 1):
        call = {"name": TOOL.name, "arguments": json.dumps({"term": term})}
        messages += [
            {"role": "user", "content": f"What is {term}?"},
            {
                "role": "assistant",
                "tool_calls": [{"id": f"call_{n}", "type": "function", "function": call}],
            },
            {"role": "tool", "tool_call_id": f"call_{n}", "content": kinds},
            {"role": "assistant", "content": f"{term} is {kind}."},
        ]
    return [*messages, {"role": "user", "content": QUESTION}]


def _messages_api_exchanges() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for n, (term, kinds, kind) in enumerate(WORKED, 1):
        call = {"type": "tool_use", "id": f"call_{n}", "name": TOOL.name, "input": {"term": term}}
        result = {"type": "tool_result", "tool_use_id": f"call_{n}", "content": kinds}
        messages += [
            {"role": "user", "content": f"What is {term}?"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
            {"role": "assistant", "content": f"{term} is {kind}."},
        ]
    return [*messages, {"role": "user", "content": QUESTION}]


# Answered by a server with TOOL_TEMPLATE (see tests/real/llama_server.py): a real call.
TOOL_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "openai-tool-call": (
        "/v1/chat/completions",
        {
            "max_tokens": 100,
            "messages": _openai_exchanges(),
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": TOOL.name,
                        "description": TOOL.description,
                        "parameters": TOOL.input_schema,
                    },
                }
            ],
        },
    ),
    "anthropic-tool-call": (
        "/v1/messages",
        {
            "max_tokens": 100,
            "messages": _messages_api_exchanges(),
            "tools": [
                {
                    "name": TOOL.name,
                    "description": TOOL.description,
                    "input_schema": TOOL.input_schema,
                }
            ],
        },
    ),
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
    "responses-text": (
        "/v1/responses",
        {"max_output_tokens": 40, "input": "Name three colours.", "store": False},
    ),
    "responses-max-tokens": (
        "/v1/responses",
        {"max_output_tokens": 5, "input": "Name three colours.", "store": False},
    ),
}


async def _record(
    server: LlamaServer, cases: dict[str, tuple[str, dict[str, Any]]]
) -> dict[str, Any]:
    """Each case sent whole and streamed, on a connection of its own."""
    answers: dict[str, Any] = {}
    closing = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=closing) as session:
        for name, (path, body) in cases.items():
            for stream in (False, True):
                sent = {"model": "smollm2", **body, "stream": stream}
                if stream and path == "/v1/chat/completions":
                    sent["stream_options"] = {"include_usage": True}  # as our codec asks
                print(name, "stream" if stream else "whole", flush=True)
                async with session.post(server.base + path, json=sent) as answer:
                    answers[f"{name}{'-stream' if stream else ''}"] = {
                        "path": path,
                        "request": sent,
                        "status": answer.status,
                        "content_type": answer.headers.get("Content-Type", ""),
                        "body": (await answer.read()).decode(),
                    }
    return answers


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
        "tool_command": (
            "llama-server -m MODEL --temp 0 --parallel 1 -t 1 -c 2048 --jinja --no-webui"
            " --chat-template-file tests/real/chatml_tools.jinja"
        ),
        "cases": {},
    }
    async with LlamaServer(parallel=2) as server:
        recorded["cases"] = await _record(server, CASES)
    async with LlamaServer(parallel=1, chat_template=TOOL_TEMPLATE) as server:
        recorded["tool_cases"] = await _record(server, TOOL_CASES)
    OUT.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n")
    answers = len(recorded["cases"]) + len(recorded["tool_cases"])
    print(f"wrote {OUT} ({answers} answers from {recorded['server']})")


if __name__ == "__main__":
    asyncio.run(main())
