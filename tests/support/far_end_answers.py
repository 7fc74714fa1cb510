"""One answer of each backend's wire, whole and streamed, from a loopback far
end that names the request with a key (tests/providers/test_response_metadata.py,
tests/hostile/test_shown_headers_and_counts.py)."""

from __future__ import annotations

import json
from typing import Any

from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai

KEY = "sk-ant-api03-K9v2QmZt7LwR4pXsH3jN8cYb"


def built(kind: str, url: str) -> Any:
    if kind == "anthropic":
        return anthropic.provider(credential=KEY, base_url=url)
    if kind == "openai":
        return openai.provider(base_url=url, api_key=KEY, model="m")
    return ollama.provider(host=url, model="m")


def _sse(*events: dict[str, Any]) -> str:
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events)


MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "No."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 2},
}
COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "No."}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
OLLAMA_DONE = {
    "model": "m",
    "message": {"role": "assistant", "content": "No."},
    "done": True,
    "done_reason": "stop",
}

ANSWERS: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "anthropic": (
        ("application/json", json.dumps(MESSAGE)),
        (
            "text/event-stream",
            "".join(
                f"event: {e['type']}\n{_sse(e)}"
                for e in (
                    {"type": "message_start", "message": {**MESSAGE, "content": []}},
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": "No."},
                    },
                    {"type": "content_block_stop", "index": 0},
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                        "usage": {"output_tokens": 2},
                    },
                    {"type": "message_stop"},
                )
            ),
        ),
    ),
    "openai": (
        ("application/json", json.dumps(COMPLETION)),
        (
            "text/event-stream",
            _sse(
                {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "model": "m",
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "No."}}],
                },
                {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "model": "m",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                },
            )
            + "data: [DONE]\n\n",
        ),
    ),
    "ollama": (
        ("application/json", json.dumps(OLLAMA_DONE)),
        ("application/x-ndjson", json.dumps(OLLAMA_DONE) + "\n"),
    ),
}
