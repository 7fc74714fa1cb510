"""Every request encoder over the closed block union (#37 item 4): each block
type, in each role and inside a tool result, is either written or refused as
``LLMEncode`` before any byte is sent; so is an object of no block type, with
or without a ``type`` attribute. Nothing else escapes (an AttributeError, a
TypeError, an AssertionError)."""

from __future__ import annotations

from typing import Any

import pytest

from vaelii_llm import errors
from vaelii_llm._protocol import Block
from vaelii_llm._protocol import DocumentBlock
from vaelii_llm._protocol import ImageBlock
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import OpaqueBlock
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


class Foreign:
    """Not a block, and no ``type`` to name."""


class Typed:
    type = "mystery"


def blocks() -> list[Any]:
    return [
        TextBlock(text="t"),
        ThinkingBlock(thinking="th", signature="sig"),
        RedactedThinkingBlock(data="d"),
        ToolUseBlock(id="call_1", name="kb_query", input={"goal": "x"}),
        ToolResultBlock(tool_use_id="call_1", content="r"),
        ToolResultBlock(tool_use_id="call_1", content=[TextBlock(text="r")]),
        OpaqueBlock(type="mystery_block", raw={"type": "mystery_block"}),
        ImageBlock(data=PNG, media_type="image/png"),
        DocumentBlock(text="doc", media_type="text/plain"),
        Foreign(),
        Typed(),
    ]


def encoders() -> list[Any]:
    return [
        ollama.provider(host="http://127.0.0.1:9")._codec,
        openai.provider(base_url="http://127.0.0.1:9/v1")._codec,
        anthropic.provider(credential="sk-test", base_url="http://127.0.0.1:9")._codec,
    ]


def requests(block: Any) -> list[Request]:
    wrapped: list[Block] = [ToolResultBlock(tool_use_id="call_1", content=[block])]
    return [
        Request(messages=[Message(role="user", content=[block])]),
        Request(
            messages=[
                Message(role="user", content="q"),
                Message(role="assistant", content=[block]),
            ]
        ),
        Request(
            messages=[
                Message(role="user", content="q"),
                Message(
                    role="assistant",
                    content=[ToolUseBlock(id="call_1", name="kb_query", input={})],
                ),
                Message(role="user", content=wrapped),
            ]
        ),
    ]


@pytest.mark.usefixtures("_no_ambient_credential")
@pytest.mark.parametrize("block", blocks(), ids=lambda b: type(b).__name__)
def test_each_block_is_written_or_refused_as_llm_encode(block: Any) -> None:
    written = refused = 0
    for codec in encoders():
        for request in requests(block):
            try:
                body = codec.body(request, stream=False)
            except errors.LLMEncode:
                refused += 1
            else:
                assert isinstance(body, bytes)
                written += 1
    if isinstance(block, Foreign | Typed):
        assert written == 0
    else:
        assert written > 0  # every block type is taken by some wire in some place
    assert written + refused == 9
