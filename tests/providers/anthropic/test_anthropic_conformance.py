"""Conformance: the official ``anthropic`` SDK and this backend read the same SSE
transcripts from one loopback server, and must build the same message.

For each generated transcript (text split at random points, citations,
thinking with its signature delta, tool_use with many ``input_json_delta``
pieces, redacted thinking, pings, every stop reason, refusals with stop
details, cumulative usage, an unknown block type with an unknown delta
type), the SDK's ``messages.stream(...).get_final_message()``
and our ``stream`` must agree on every content block, the stop reason and the
usage; but for the unknown block, whose deltas the SDK drops and we apply
(the whole message holds them), where ours must equal the whole message's.
One server and one SDK client serve every transcript, so the test stays fast.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import generate
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm.providers import anthropic

anthropic_sdk = pytest.importorskip("anthropic")

TRANSCRIPTS = 60
SEED = 20261130


pytestmark = pytest.mark.usefixtures("_no_ambient_credential")


def _sdk_usage(usage: Any) -> dict[str, int | None]:
    """The SDK's counts in :class:`Usage`'s meaning: the Messages API's
    ``input_tokens`` leaves out the cache's part, which ``Usage`` counts."""
    counts = {
        name: getattr(usage, name, None)
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        )
    }
    if counts["input_tokens"] is not None:
        counts["input_tokens"] += (counts["cache_creation_input_tokens"] or 0) + (
            counts["cache_read_input_tokens"] or 0
        )
    return counts


async def test_same_message_as_the_official_sdk() -> None:
    api = FakeMessagesAPI(seed=SEED)
    server = TestServer(api.app(), host="127.0.0.1", port=0)
    await server.start_server()
    base_url = str(server.make_url("")).rstrip("/")
    client = anthropic_sdk.AsyncAnthropic(api_key="sk-test", base_url=base_url, max_retries=0)
    ours = anthropic.provider(credential="sk-test", base_url=base_url)
    rng = random.Random(SEED)
    kinds_seen: set[str] = set()
    stops_seen: set[str] = set()
    try:
        for n in range(TRANSCRIPTS):
            # unknown block and delta types included: the SDK keeps an unknown
            # block's fields as given, as our OpaqueBlock's raw does
            transcript = generate(rng)
            api.transcript = transcript
            async with client.messages.stream(
                model="claude-opus-5-5",
                max_tokens=1024,
                messages=[{"role": "user", "content": "hi"}],
            ) as sdk_stream:
                theirs = await sdk_stream.get_final_message()
            items = [
                item
                async for item in ours.stream(
                    Request(messages=[Message(role="user", content="hi")])
                )
            ]
            final = items[-1]
            assert isinstance(final, Response)
            assert items[:-1] == final.content, n
            assert final.stop_reason == theirs.stop_reason, n
            assert final.stop_sequence == theirs.stop_sequence, n
            assert final.id == theirs.id, n
            assert final.model == theirs.model, n
            expected_usage = _sdk_usage(theirs.usage)
            assert {k: getattr(final.usage, k) for k in expected_usage} == expected_usage, n
            their_blocks = [b.to_dict() for b in theirs.content]
            # The SDK drops the deltas of a block type it does not know; the
            # non-streamed message is the truth for those (issue 12).
            expected = [
                whole if theirs_b["type"] == "mystery_block" else theirs_b
                for theirs_b, whole in zip(their_blocks, transcript.message["content"], strict=True)
            ]
            assert [b.raw for b in final.content] == expected, n
            if theirs.stop_details is not None:
                assert final.stop_details == theirs.stop_details.to_dict(), n
            else:
                assert final.stop_details is None, n
            kinds_seen.update(b["type"] for b in their_blocks)
            stops_seen.add(str(final.stop_reason))
    finally:
        await ours.aclose()
        await client.close()
        await server.close()
    assert {"text", "thinking", "tool_use", "redacted_thinking", "mystery_block"} <= kinds_seen
    assert {"refusal", "tool_use", "end_turn"} <= stops_seen
