"""Images and documents as neutral blocks, and tool results that are more than a string.

Each backend's body for them is checked against the official package's own
request types (``anthropic``, ``openai``: their TypedDicts; ``ollama``: the
body its client sends for the same conversation, on a loopback host), and a
block over a far end's documented limit is refused before a byte is sent
(the loopback server sees no request).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import aclosing
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestServer

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import Transcript
from tests.support.fake_ollama import MODEL as OLLAMA_MODEL
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.fake_openai import FakeOpenAI
from tests.support.typed_conformance import conforms
from vaelii_llm import DocumentBlock
from vaelii_llm import ImageBlock
from vaelii_llm import Message
from vaelii_llm import Provider
from vaelii_llm import Request
from vaelii_llm import TextBlock
from vaelii_llm import ToolResultBlock
from vaelii_llm import ToolUseBlock
from vaelii_llm import errors
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai
from vaelii_llm.providers import stub
from vaelii_llm.providers.anthropic._encode import build_body
from vaelii_llm.providers.ollama._chat import chat_body as ollama_body
from vaelii_llm.providers.openai._chat import chat_body as openai_body

ROOT = Path(__file__).resolve().parents[2]
PNG = (ROOT / "examples" / "red_square.png").read_bytes()
PNG_B64 = base64.b64encode(PNG).decode()
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(32)
GIF = b"GIF89a" + bytes(32)
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + bytes(32)
PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
PDF_B64 = base64.b64encode(PDF).decode()

IMAGE = ImageBlock.from_bytes(PNG)
URL_IMAGE = ImageBlock(url="https://example.com/cat.png")
PDF_DOC = DocumentBlock.from_bytes(PDF, title="report.pdf")
URL_DOC = DocumentBlock(url="https://example.com/report.pdf")
TEXT_DOC = DocumentBlock(text="Miss Muffet sat on a tuffet.", title="rhyme")
CALL = ToolUseBlock(id="call_1", name="screenshot", input={"page": 1})


# ---------------------------------------------------------------- the blocks


@pytest.mark.parametrize(
    ("data", "media_type"),
    [(PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp")],
)
def test_an_image_takes_its_media_type_from_its_bytes(data: bytes, media_type: str) -> None:
    block = ImageBlock.from_bytes(data)
    assert (block.media_type, block.data, block.url) == (media_type, data, None)


def test_a_file_name_does_not_decide_the_type(tmp_path: Path) -> None:
    path = tmp_path / "photo.jpg"
    path.write_bytes(PNG)
    assert ImageBlock.from_path(path) == ImageBlock(data=PNG, media_type="image/png")
    assert ImageBlock.from_path(str(path)).media_type == "image/png"


def test_bytes_the_package_cannot_read_need_their_type_named() -> None:
    with pytest.raises(ValueError, match="media_type="):
        ImageBlock.from_bytes(b"II*\x00 a tiff")
    tiff = ImageBlock.from_bytes(b"II*\x00 a tiff", media_type="image/tiff")
    assert tiff.media_type == "image/tiff"
    with pytest.raises(ValueError, match="these bytes are image/png, not image/jpeg"):
        ImageBlock.from_bytes(PNG, media_type="image/jpeg")
    with pytest.raises(ValueError, match="application/pdf, not an image"):
        ImageBlock.from_bytes(PDF)


def test_a_block_holds_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ImageBlock(data=PNG, media_type="image/png", url="https://x/y.png")
    with pytest.raises(ValueError, match="exactly one"):
        ImageBlock()
    with pytest.raises(ValueError, match="media_type"):
        ImageBlock(data=PNG)
    with pytest.raises(ValueError, match="exactly one"):
        DocumentBlock(text="a", url="https://x/y.pdf")


def test_a_repr_never_holds_the_bytes() -> None:
    big = ImageBlock.from_bytes(PNG + bytes(100_000))
    assert repr(big) == f"ImageBlock(<{len(PNG) + 100_000} bytes>, media_type='image/png')"
    assert "bytes" in repr(PDF_DOC)
    assert "%PDF" not in repr(PDF_DOC)
    assert "tuffet" not in repr(TEXT_DOC)
    assert repr(URL_IMAGE) == "ImageBlock(url='https://example.com/cat.png', media_type=None)"


def test_a_document_is_a_pdf_or_utf8_text(tmp_path: Path) -> None:
    (tmp_path / "a.pdf").write_bytes(PDF)
    (tmp_path / "notes.md").write_text("# Notes\nSpiders: eight legs.\n", encoding="utf-8")
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x00\x01")
    (tmp_path / "pic.txt").write_bytes(PNG)
    pdf = DocumentBlock.from_path(tmp_path / "a.pdf")
    assert (pdf.data, pdf.media_type, pdf.text) == (PDF, "application/pdf", None)
    notes = DocumentBlock.from_path(tmp_path / "notes.md", title="notes")
    assert (notes.text, notes.title, notes.data) == (
        "# Notes\nSpiders: eight legs.\n",
        "notes",
        None,
    )
    with pytest.raises(ValueError, match="binary"):
        DocumentBlock.from_path(tmp_path / "blob.bin")
    with pytest.raises(ValueError, match="image/png"):
        DocumentBlock.from_path(tmp_path / "pic.txt")


def test_a_tool_result_is_still_a_string_or_now_a_list() -> None:
    assert ToolResultBlock(tool_use_id="t", content="ok").content == "ok"
    listed = ToolResultBlock(tool_use_id="t", content=[TextBlock(text="shot:"), IMAGE])
    assert listed.content == [TextBlock(text="shot:"), IMAGE]


# ---------------------------------------------------------------- the Messages API


def media_request() -> Request:
    return Request(
        messages=[
            Message(
                role="user",
                content=[IMAGE, URL_IMAGE, PDF_DOC, URL_DOC, TEXT_DOC, TextBlock(text="Compare.")],
            ),
            Message(role="assistant", content=[CALL]),
            Message(
                role="user",
                content=[
                    ToolResultBlock(
                        tool_use_id="call_1",
                        content=[TextBlock(text="page 1:"), IMAGE, PDF_DOC],
                    ),
                    TextBlock(text="And now?"),
                ],
            ),
        ],
        fallbacks=None,  # a beta field, outside the non-beta request types
    )


def wire(body: dict[str, Any]) -> Any:
    """The body as the far end reads it (bytes become base64 text)."""
    return json.loads(msgspec.json.encode(body))


def test_the_messages_api_body_holds_image_and_document_blocks_with_their_sources() -> None:
    body = wire(build_body(media_request()))
    first, _, last = body["messages"]
    assert first["content"][:5] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_B64},
            "title": "report.pdf",
        },
        {"type": "document", "source": {"type": "url", "url": "https://example.com/report.pdf"}},
        {
            "type": "document",
            "source": {
                "type": "text",
                "media_type": "text/plain",
                "data": "Miss Muffet sat on a tuffet.",
            },
            "title": "rhyme",
        },
    ]
    result = last["content"][0]
    assert result["content"] == [
        {"type": "text", "text": "page 1:"},
        first["content"][0],
        first["content"][2],
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_the_messages_api_body_is_one_the_official_types_accept(stream: bool) -> None:
    params = pytest.importorskip("anthropic.types.message_create_params")
    hint = params.MessageCreateParamsStreaming if stream else params.MessageCreateParamsNonStreaming
    body = wire(build_body(media_request(), stream=stream))
    assert conforms(body, hint) == []
    # the check bites on these blocks: a type the API does not name fails it
    body["messages"][0]["content"][0]["source"]["media_type"] = "image/bmp"
    body["messages"][0]["content"][2]["source"]["type"] = "pdf"
    assert "body.messages[0]: no branch" in " ".join(conforms(body, hint))


def test_a_string_tool_result_is_sent_as_before() -> None:
    request = Request(
        messages=[Message(role="user", content=[ToolResultBlock(tool_use_id="t", content="ok")])]
    )
    [message] = build_body(request)["messages"]
    assert message["content"] == [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]


OVER_5MB = ImageBlock.from_bytes(PNG + bytes(4 * 1024 * 1024))  # 5.3 MB base64-encoded
BMP = ImageBlock(data=b"BM" + bytes(64), media_type="image/bmp")
WORD = DocumentBlock(data=b"PK\x03\x04", media_type="application/msword")


@pytest.mark.parametrize(
    ("block", "words"),
    [
        (OVER_5MB, "it is 5.3 MB base64-encoded, over the Messages API's 5 MB per image"),
        (BMP, "its type 'image/bmp' is not one it takes (image/gif, image/jpeg, image/png, "),
        (WORD, "its type 'application/msword' is not one it takes (application/pdf)"),
    ],
)
@pytest.mark.parametrize("where", ["message", "tool result"])
async def test_the_messages_api_refuses_what_it_would_refuse_before_sending(
    block: ImageBlock | DocumentBlock, words: str, where: str
) -> None:
    content: list[Any] = [block, TextBlock(text="What is it?")]
    if where == "tool result":
        content = [ToolResultBlock(tool_use_id="t", content=[block])]
    request = Request(messages=[Message(role="user", content=content)])
    api = FakeMessagesAPI(transcript=_text_turn("never"))
    async with _serving(api) as url, anthropic.provider(credential="sk-test", base_url=url) as p:
        with pytest.raises(errors.LLMEncode) as info:
            await p.complete(request)
        with pytest.raises(errors.LLMEncode):
            async with aclosing(p.stream(request)) as items:
                [item async for item in items]
    assert api.seen == []  # no byte reached the far end
    assert words in str(info.value)
    assert info.value.block_type == block.type
    assert info.value.reason is not None
    assert info.value.reason in str(info.value)


async def test_the_messages_api_loopback_receives_the_image() -> None:
    api = FakeMessagesAPI(transcript=_text_turn("A red square."))
    request = Request(messages=[Message(role="user", content=[IMAGE, TextBlock(text="What?")])])
    async with _serving(api) as url, anthropic.provider(credential="sk-test", base_url=url) as p:
        response = await p.complete(request)
    assert response.content == [TextBlock(text="A red square.", raw=response.content[0].raw)]
    [seen] = api.seen
    assert seen.body["messages"][0]["content"][0]["source"]["data"] == PNG_B64


def _text_turn(text: str) -> Transcript:
    message = {
        "id": "msg_media",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-5-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 4},
    }
    return Transcript(events=[], message=message)


@asynccontextmanager
async def _serving(api: FakeMessagesAPI) -> AsyncIterator[str]:
    server = TestServer(api.app(), host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


# ---------------------------------------------------------------- Ollama


def _ollama(request: Request) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(
        ollama_body(request, model=OLLAMA_MODEL, num_ctx=2048, keep_alive="5m", stream=False)
    )
    return body


def test_ollama_sends_a_messages_images_as_base64_without_a_prefix() -> None:
    request = Request(
        messages=[
            Message(
                role="user", content=[IMAGE, TextBlock(text="What is "), TextBlock(text="it?")]
            ),
            Message(role="assistant", content=[CALL]),
            Message(
                role="user",
                content=[
                    ToolResultBlock(tool_use_id="call_1", content=[TextBlock(text="page 1")]),
                    ImageBlock.from_bytes(JPEG),
                ],
            ),
        ]
    )
    first, _, tool, after = _ollama(request)["messages"]
    assert first == {"role": "user", "content": "What is it?", "images": [PNG_B64]}
    assert tool == {"role": "tool", "content": "page 1", "tool_name": "screenshot"}
    assert after == {"role": "user", "content": "", "images": [base64.b64encode(JPEG).decode()]}


async def test_ollama_sends_what_the_official_client_sends_for_the_same_conversation() -> None:
    sdk = pytest.importorskip("ollama")
    server = await FakeOllama(script=lambda body: [chunk("A red square."), final()]).start()
    request = Request(
        messages=[
            Message(role="user", content=[IMAGE, TextBlock(text="What is it?")]),
            Message(role="assistant", content=[CALL]),
            Message(role="user", content=[ToolResultBlock(tool_use_id="call_1", content="ok")]),
        ]
    )
    try:
        async with sdk.AsyncClient(host=server.url) as client:
            await client.chat(
                model=OLLAMA_MODEL,
                messages=[
                    {"role": "user", "content": "What is it?", "images": [PNG]},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {"function": {"name": "screenshot", "arguments": {"page": 1}}}
                        ],
                    },
                    {"role": "tool", "content": "ok", "tool_name": "screenshot"},
                ],
            )
        async with ollama.provider(host=server.url) as p:
            answer = await p.complete(request)
    finally:
        await server.stop()
    theirs, ours = server.bodies
    # the user message with its image, and the tool result, as the client writes them
    # (the client drops an assistant message's empty content, which this wire sends)
    assert [ours["messages"][i] for i in (0, 2)] == [theirs["messages"][i] for i in (0, 2)]
    assert ours["messages"][0]["images"] == [PNG_B64]
    assert set(ours) <= set(pytest.importorskip("ollama._types").ChatRequest.model_fields)
    assert answer.content == [TextBlock(text="A red square.")]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ([PDF_DOC], "Ollama has no document input"),
        ([TEXT_DOC], "Ollama has no document input"),
        ([URL_IMAGE], "Ollama takes an image's bytes, not a URL"),
        ([ToolResultBlock(tool_use_id="t", content=[IMAGE])], "takes a tool result as text only"),
    ],
)
async def test_ollama_refuses_what_it_cannot_take_before_sending(
    content: list[Any], words: str
) -> None:
    server = await FakeOllama().start()
    try:
        async with ollama.provider(host=server.url) as p:
            with pytest.raises(errors.LLMEncode) as info:
                await p.complete(Request(messages=[Message(role="user", content=content)]))
    finally:
        await server.stop()
    assert server.bodies == []
    assert words in str(info.value)
    assert info.value.block_type in ("image", "document")


# ---------------------------------------------------------------- the Chat Completions wire


def _openai(request: Request, *, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(
        openai_body(request, model="m", max_tokens_field="max_tokens", stream=stream)
    )
    return body


def openai_request() -> Request:
    second = ToolUseBlock(id="call_2", name="screenshot", input={"page": 2})
    return Request(
        messages=[
            Message(
                role="user",
                content=[TextBlock(text="Look:"), IMAGE, URL_IMAGE, PDF_DOC, TEXT_DOC],
            ),
            Message(role="assistant", content=[CALL, second]),
            Message(
                role="user",
                content=[
                    ToolResultBlock(
                        tool_use_id="call_1", content=[TextBlock(text="page 1"), IMAGE]
                    ),
                    ToolResultBlock(tool_use_id="call_2", content=[IMAGE]),
                    TextBlock(text="Which is red?"),
                ],
            ),
        ]
    )


def test_the_chat_completions_body_sends_images_as_data_urls_and_pdfs_as_file_parts() -> None:
    messages = _openai(openai_request())["messages"]
    image_part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}}
    assert messages[0]["content"] == [
        {"type": "text", "text": "Look:"},
        image_part,
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {
            "type": "file",
            "file": {
                "filename": "report.pdf",
                "file_data": f"data:application/pdf;base64,{PDF_B64}",
            },
        },
        {"type": "text", "text": "rhyme\n\nMiss Muffet sat on a tuffet."},
    ]
    # the tool messages stay text; their images follow in one user message
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "user"]
    assert messages[2] == {
        "role": "tool",
        "content": "page 1\n(1 attachment(s) follow in the next user message)",
        "tool_call_id": "call_1",
    }
    assert messages[3]["content"] == "(1 attachment(s) follow in the next user message)"
    assert messages[4]["content"] == [
        {"type": "text", "text": "What tool call call_1 returned:"},
        image_part,
        {"type": "text", "text": "What tool call call_2 returned:"},
        image_part,
        {"type": "text", "text": "Which is red?"},
    ]


def test_a_text_only_user_message_stays_a_string_on_the_chat_completions_wire() -> None:
    request = Request(messages=[Message(role="user", content=[TextBlock(text="hi")])])
    assert _openai(request)["messages"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("stream", [False, True])
def test_the_chat_completions_body_is_one_the_official_types_accept(stream: bool) -> None:
    params = pytest.importorskip("openai.types.chat.completion_create_params")
    hint = (
        params.CompletionCreateParamsStreaming
        if stream
        else params.CompletionCreateParamsNonStreaming
    )
    body = _openai(openai_request(), stream=stream)
    assert conforms(body, hint) == []
    body["messages"][0]["content"][1]["image_url"] = "data:image/png;base64,AAAA"
    body["messages"][2]["content"] = [{"type": "image_url", "image_url": {"url": "x"}}]
    found = " ".join(conforms(body, hint))
    assert "body.messages[0]: no branch" in found
    assert "body.messages[2]: no branch" in found


@pytest.mark.parametrize(
    ("block", "words"),
    [
        (BMP, "its type 'image/bmp' is not one it takes"),
        (URL_DOC, "this wire takes a document's bytes, not a URL"),
        (WORD, "its type 'application/msword' is not one it takes (application/pdf)"),
    ],
)
async def test_the_chat_completions_wire_refuses_what_it_cannot_take_before_sending(
    block: ImageBlock | DocumentBlock, words: str
) -> None:
    server = await FakeOpenAI().start()
    try:
        async with openai.provider(base_url=server.url + "/v1") as p:
            with pytest.raises(errors.LLMEncode) as info:
                await p.complete(Request(messages=[Message(role="user", content=[block])]))
    finally:
        await server.stop()
    assert server.bodies == []
    assert words in str(info.value)


def test_the_chat_completions_limit_is_the_documented_payload() -> None:
    over = ImageBlock.from_bytes(PNG + bytes(38 * 1024 * 1024))  # 50.7 MB base64-encoded
    with pytest.raises(errors.LLMEncode, match="over the 50 MB request payload OpenAI documents"):
        _openai(Request(messages=[Message(role="user", content=[over])]))


# ---------------------------------------------------------------- the stub


async def test_the_stub_takes_images_and_documents_and_keeps_them_for_the_test() -> None:
    model: Provider = stub.provider(script=["A red square."])
    request = Request(
        messages=[Message(role="user", content=[IMAGE, PDF_DOC, TextBlock(text="?")])]
    )
    response = await model.complete(request)
    assert response.content == [TextBlock(text="A red square.")]
    assert isinstance(model, stub.StubProvider)
    [seen] = model.requests()
    assert seen.messages[0].content[:2] == [IMAGE, PDF_DOC]
    assert model.last_user_text() == "?"


async def test_the_agent_loop_carries_an_image_question_through_a_tool_turn() -> None:
    from vaelii_llm import agent
    from vaelii_llm import kb
    from vaelii_llm import tools

    toolset = tools.Toolset(kb.sample())
    first = agent.request("What is in this picture?", toolset)
    question = msgspec.structs.replace(
        first, messages=[Message(role="user", content=[IMAGE, TextBlock(text="What is it?")])]
    )
    model = stub.provider(
        script=[{"tool": "kb_types_of", "input": {"term": "Muffet"}}, "A spider, Muffet."]
    )
    result = await agent.run(model, toolset, question)
    assert (result.stopped, result.answer) == ("answered", "A spider, Muffet.")
    second = model.requests()[1]
    assert second.messages[0].content[0] == IMAGE  # the image stays in the conversation
    [tool_result] = second.messages[2].content
    assert isinstance(tool_result, ToolResultBlock)
    assert isinstance(tool_result.content, str)


# ---------------------------------------------------------------- the guide


GUIDE = ROOT / "docs" / "guides" / "images-and-documents.md"


@pytest.mark.parametrize(
    "n", range(len(re.findall(r"^```python\n", GUIDE.read_text(), re.MULTILINE)))
)
def test_every_program_of_the_guide_runs_on_the_stub(n: int, tmp_path: Path) -> None:
    program = re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), re.DOTALL | re.MULTILINE)[n]
    (tmp_path / "program.py").write_text(program)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAELII_", "ANTHROPIC_"))}
    out = subprocess.run(
        [sys.executable, "program.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.strip()
