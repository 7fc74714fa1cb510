"""The official clients' types are the oracle (#59), on every wire and lane.

Every request body each backend can send is built from one neutral request
holding every shape an encoder writes (system blocks, text, an image by bytes
and by URL, a PDF and a text document, tools with and without ``strict``,
tool results of text and of an image, thinking carried back, a JSON schema
format, effort, temperature, stop sequences, every option), in each of its
variants, and checked against the official client's request type
(:func:`typed_conformance.conforms`: required keys present, no key the type
does not name, literals and scalars of their type):

========================================  ==============================================
body                                      type
========================================  ==============================================
Chat Completions, whole / streamed,       ``openai.types.chat.completion_create_params``
each token field, thinking back or not    ``.CompletionCreateParamsNonStreaming`` /
                                          ``…Streaming`` (thinking back aside: below)
Responses, whole / streamed,              ``openai.types.responses.response_create_params``
stored or not, after a turn of its own    ``.ResponseCreateParamsNonStreaming`` / ``…Streaming``
Responses token count                     ``…input_token_count_params.InputTokenCountParams``
Messages API, whole / streamed            ``anthropic.types.beta.message_create_params…``
(server-side fallbacks: a beta)           ``MessageCreateParamsNonStreaming`` / ``…Streaming``
Messages API, ``fallbacks=None``          ``anthropic.types.message_create_params…``
                                          ``MessageCreateParamsNonStreaming`` / ``…Streaming``
Ollama, whole / streamed                  ``ollama._types.ChatRequest`` (and its ``Message``)
========================================  ==============================================

The Chat Completions body's one extension is an assistant message's thinking
(``reasoning_content``, or ``reasoning``): DeepSeek, vLLM and llama.cpp's
server read it, OpenAI's type names no such field, and OpenAI's own API is
sent none (``send_reasoning`` is off there).

Every recorded or published answer parses in the official response types
(``ChatCompletion``, ``ChatCompletionChunk``, ``responses.Response``,
``ResponseStreamEvent``, ``anthropic.types.Message``,
``RawMessageStreamEvent``, ``ollama.ChatResponse``), and every field those
types' docs say to send back (a message's ``phase``, encrypted reasoning, a
thinking block's ``signature``) comes back in the next request as it came.

A field a vendor renames or removes fails here on the newest lane the day its
client ships; the lowest lane runs the same checks at the declared floors.
"""

from __future__ import annotations

import inspect
import json
import random
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.support.typed_conformance import conforms
from tests.support.typed_conformance import without_reasoning
from vaelii_llm._media import DocumentBlock
from vaelii_llm._media import ImageBlock
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm.errors import LLMEncode
from vaelii_llm.providers.anthropic._decode import from_parsed
from vaelii_llm.providers.anthropic._encode import build_body
from vaelii_llm.providers.ollama._chat import chat_body as ollama_body
from vaelii_llm.providers.openai._chat import chat_body
from vaelii_llm.providers.openai._responses_assemble import WHOLE_DECODER
from vaelii_llm.providers.openai._responses_assemble import response_of
from vaelii_llm.providers.openai._responses_request import responses_body

pydantic = pytest.importorskip("pydantic")
chat_params = pytest.importorskip("openai.types.chat.completion_create_params")
responses_params = pytest.importorskip("openai.types.responses.response_create_params")
count_params = pytest.importorskip("openai.types.responses.input_token_count_params")
openai_types = pytest.importorskip("openai.types")
chat_types = pytest.importorskip("openai.types.chat")
responses_types = pytest.importorskip("openai.types.responses")
messages_params = pytest.importorskip("anthropic.types.message_create_params")
beta_messages_params = pytest.importorskip("anthropic.types.beta.message_create_params")
anthropic_types = pytest.importorskip("anthropic.types")
ollama_types = pytest.importorskip("ollama._types")

PNG = Path(__file__).resolve().parents[2] / "examples" / "red_square.png"
RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "real" / "recorded" / "llama_server.json").read_text()
)["cases"]

TOOLS = [
    ToolSchema(
        name="kb_query",
        description="Prove a goal.",
        input_schema={"type": "object", "properties": {"goal": {"type": "string"}}},
    ),
    ToolSchema(
        name="kb_types_of",
        description="Types of a term.",
        input_schema={
            "type": "object",
            "properties": {"term": {"type": "string"}},
            "required": ["term"],
            "additionalProperties": False,
        },
        strict=True,
    ),
]
FORMAT = {
    "title": "Answer",
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def neutral(
    *, documents: bool = True, url_image: bool = True, stop: bool = True, **fields: Any
) -> Request:
    """One request holding every shape the encoders write (a wire that has
    no shape for one of them is given the request without it)."""
    image = ImageBlock.from_path(PNG)
    user: list[Any] = [TextBlock(text="Look:"), image]
    if url_image:
        user.append(ImageBlock(url="https://example.com/cat.png"))
    if documents:
        user += [
            DocumentBlock(data=b"%PDF-1.4 fake", media_type="application/pdf", title="a.pdf"),
            DocumentBlock(text="Muffet is a dog.", title="Notes"),
        ]
    call = ToolUseBlock(id="call_1", name="kb_types_of", input={"term": "Muffet"})
    return Request(
        system=[TextBlock(text="Answer from the KB."), TextBlock(text="Be brief.")],
        messages=[
            Message(role="user", content=user),
            Message(
                role="assistant",
                content=[
                    ThinkingBlock(thinking="Ask the KB.", signature="sig-1"),
                    TextBlock(text="Asking."),
                    call,
                ],
            ),
            Message(
                role="user",
                content=[
                    ToolResultBlock(tool_use_id="call_1", content="(Dog)"),
                    TextBlock(text="And now?"),
                ],
            ),
            Message(role="assistant", content=[call]),
            Message(
                role="user",
                content=[
                    ToolResultBlock(
                        tool_use_id="call_1",
                        content=[TextBlock(text="a picture:"), image],
                        is_error=False,
                    )
                ],
            ),
        ],
        tools=TOOLS,
        max_tokens=300,
        stop_sequences=["END"] if stop else [],
        format=FORMAT,
        effort="high",
        temperature=0.2,
        thinking_display="summarized",
        **fields,
    )


def _hint(module: Any, name: str, stream: bool) -> Any:
    return getattr(module, f"{name}{'Streaming' if stream else 'NonStreaming'}")


# -- Chat Completions ----------------------------------------------------------------------


@pytest.mark.parametrize("send_reasoning", [True, False])
@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("stream", [False, True])
def test_every_chat_completions_body_is_one_the_official_type_accepts(
    stream: bool, field: Any, send_reasoning: bool
) -> None:
    body = json.loads(
        chat_body(
            neutral(),
            model="m",
            max_tokens_field=field,
            stream=stream,
            send_reasoning=send_reasoning,
        )
    )
    assert without_reasoning(body) == (["Ask the KB."] if send_reasoning else [])
    assert conforms(body, _hint(chat_params, "CompletionCreateParams", stream)) == []
    assert (body["reasoning_effort"], body["temperature"], body[field]) == ("high", 0.2, 300)


# -- Responses -----------------------------------------------------------------------------

ITEMS = [
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Ask the KB."}],
        "encrypted_content": "gAAAAB-enc",
    },
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "phase": "commentary",
        "content": [{"type": "output_text", "text": "Asking.", "annotations": [], "logprobs": []}],
    },
    {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "kb_types_of",
        "arguments": '{"term": "Muffet"}',
        "status": "completed",
    },
]
"""One turn's output items as OpenAI's Responses API sends them (the official
``ResponseReasoningItem``, ``ResponseOutputMessage``, ``ResponseFunctionToolCall``)."""


def _answered(items: list[dict[str, Any]]) -> Any:
    """What the Responses wire made of a response listing ``items``."""
    whole = {"id": "resp_1", "model": "m", "status": "completed", "output": items}
    return response_of(WHOLE_DECODER.decode(json.dumps(whole).encode()))


def _after_a_turn(**fields: Any) -> Request:
    """The neutral request with the Responses wire's own turn in its history."""
    request = neutral(stop=False, **fields)
    turn = _answered(ITEMS).content
    result = ToolResultBlock(tool_use_id="call_1", content="(Dog)")
    return msgspec.structs.replace(
        request,
        messages=[
            *request.messages,
            Message(role="assistant", content=turn),
            Message(role="user", content=[result]),
        ],
    )


@pytest.mark.parametrize("store", [False, True])
@pytest.mark.parametrize("stream", [False, True])
def test_every_responses_body_is_one_the_official_type_accepts(stream: bool, store: bool) -> None:
    request = _after_a_turn()
    body = json.loads(responses_body(request, model="m", store=store, stream=stream))
    assert conforms(body, _hint(responses_params, "ResponseCreateParams", stream)) == []
    assert body.get("include") == (None if store else ["reasoning.encrypted_content"])
    counted = json.loads(responses_body(request, model="m", store=store, stream=False, count=True))
    assert conforms(counted, count_params.InputTokenCountParams) == []


def test_what_the_official_types_say_to_send_back_comes_back_as_it_came() -> None:
    """Each output item parses in its official type; sent back, each is the
    item as it came: a message's ``id`` and ``phase`` ("preserve and resend
    phase on all assistant messages"), the encrypted reasoning, a call's ``id``."""
    for item in ITEMS:
        pydantic.TypeAdapter(responses_types.ResponseOutputItem).validate_python(item)
    # what the official type asks, read from its source (the field's docstring)
    assert "resend phase" in inspect.getsource(responses_types.ResponseOutputMessage)
    body = json.loads(responses_body(_after_a_turn(), model="m", store=False, stream=False))
    assert [item for item in body["input"] if item in ITEMS] == ITEMS


# -- the Messages API ----------------------------------------------------------------------


@pytest.mark.parametrize("fallbacks", ["default", None])
@pytest.mark.parametrize("stream", [False, True])
def test_every_messages_api_body_is_one_the_official_type_accepts(
    stream: bool, fallbacks: str | None
) -> None:
    request = neutral(url_image=True)
    if fallbacks is None:
        request = msgspec.structs.replace(request, fallbacks=None)
    body = json.loads(msgspec.json.encode(build_body(request, stream=stream)))  # as sent
    # server-side fallbacks are a beta: the beta type names them, the plain one does not
    module = beta_messages_params if fallbacks else messages_params
    assert conforms(body, _hint(module, "MessageCreateParams", stream)) == []
    assert ("fallbacks" in body) is (fallbacks is not None)


def test_a_thinking_blocks_signature_comes_back_as_it_came() -> None:
    thinking = {"type": "thinking", "thinking": "Ask the KB.", "signature": "EuYBCkQYAiJA"}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-5-5",
        "content": [thinking, redacted, {"type": "text", "text": "Asking."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 5},
    }
    anthropic_types.Message.model_validate(message)
    turn = from_parsed(message, "the Messages API").content
    follow = Request(
        messages=[
            Message(role="user", content="q"),
            Message(role="assistant", content=turn),
            Message(role="user", content="go on"),
        ]
    )
    assert build_body(follow)["messages"][1]["content"][:2] == [thinking, redacted]
    assert isinstance(turn[1], RedactedThinkingBlock)


# -- Ollama --------------------------------------------------------------------------------


def _named_only(value: dict[str, Any], model: Any, at: str) -> list[str]:
    """Keys of ``value`` the pydantic ``model`` does not name (it would drop them)."""
    return [f"{at}.{key}" for key in value if key not in model.model_fields]


@pytest.mark.parametrize("stream", [False, True])
def test_every_ollama_body_is_one_the_official_type_accepts(stream: bool) -> None:
    # Ollama takes no document and no image by URL, and a tool result as text only
    request = neutral(documents=False, url_image=False, stop=True, think="high")
    messages = [
        m
        if m.role == "assistant" or isinstance(m.content, str)
        else msgspec.structs.replace(
            m,
            content=[
                b
                if not isinstance(b, ToolResultBlock)
                else msgspec.structs.replace(b, content="(Dog)")
                for b in m.content
            ],
        )
        for m in request.messages
    ]
    request = msgspec.structs.replace(request, messages=messages)
    body = json.loads(
        ollama_body(request, model="m", num_ctx=4096, keep_alive="30m", stream=stream)
    )
    parsed = ollama_types.ChatRequest.model_validate(body)
    found = _named_only(body, ollama_types.ChatRequest, "body")
    for n, message in enumerate(body["messages"]):
        found += _named_only(message, ollama_types.Message, f"body.messages[{n}]")
    found += _named_only(body["options"], ollama_types.Options, "body.options")
    assert found == []
    assert parsed.think == "high"
    assert parsed.messages is not None


# -- every recorded or published answer parses in the official response types ------------


def _frames(body: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[5:])
        for line in body.split("\n")
        if line.startswith("data:") and line[5:].strip() != "[DONE]"
    ]


@pytest.mark.parametrize(
    "name", sorted(n for n, c in RECORDED.items() if c["status"] == 200), ids=str
)
def test_every_recorded_answer_parses_in_the_official_type(name: str) -> None:
    case = RECORDED[name]
    streamed = name.endswith("-stream")
    if name.startswith("openai"):
        whole, each = chat_types.ChatCompletion, chat_types.ChatCompletionChunk
    elif name.startswith("responses"):
        whole, each = responses_types.Response, responses_types.ResponseStreamEvent
    else:
        whole, each = anthropic_types.Message, anthropic_types.RawMessageStreamEvent
    frames = [f for f in _frames(case["body"]) if f.get("type") != "ping"]
    if name.startswith("responses"):
        _llama_responses(json.loads(case["body"]) if not streamed else None, frames)
    elif not streamed:
        whole.model_validate(json.loads(case["body"]))
    else:
        assert frames
        adapter = pydantic.TypeAdapter(each)
        for frame in frames:
            adapter.validate_python(frame)


def _llama_responses(whole: dict[str, Any] | None, frames: list[dict[str, Any]]) -> None:
    """llama.cpp's server answers the Responses wire with less than OpenAI's
    ``Response`` requires (no ``parallel_tool_calls``, ``tool_choice``,
    ``tools``, ``output_tokens_details``, ``cache_write_tokens``; events
    without ``sequence_number``): the official client reads it only because
    it builds its models without validating. What this backend reads of it,
    each output item and each event's type, is held to the official types."""
    items = pydantic.TypeAdapter(responses_types.ResponseOutputItem)
    if whole is not None:
        assert whole["output"]
        for item in whole["output"]:
            items.validate_python(item)
        return
    assert frames
    named = {
        typing.get_args(member.model_fields["type"].annotation)[0]
        for member in typing.get_args(typing.get_args(responses_types.ResponseStreamEvent)[0])
    }
    for frame in frames:
        assert frame["type"] in named
        if "item" in frame and frame["type"] == "response.output_item.done":
            items.validate_python(frame["item"])
        if "response" in frame:
            for item in frame["response"].get("output") or ():
                items.validate_python(item)


@pytest.mark.parametrize("seed", range(12))
def test_every_fake_answer_parses_in_the_official_type(seed: int) -> None:
    """The fakes the suite's far ends speak are the vendors' wire, by the vendors' types."""
    from tests.support.anthropic_fake import generate
    from tests.support.fake_ollama import chunk
    from tests.support.fake_ollama import final
    from tests.support.fake_ollama import merged
    from tests.support.fake_ollama import tool_call
    from tests.support.fake_openai import random_turn
    from tests.support.fake_openai import transcript
    from tests.support.fake_openai_responses import Item
    from tests.support.fake_openai_responses import Turn

    rng = random.Random(seed)
    chat = transcript(random_turn(rng), "openai")
    chat_types.ChatCompletion.model_validate(chat.completion)
    for piece in chat.chunks:
        chat_types.ChatCompletionChunk.model_validate(piece)
    turn = Turn(
        items=[
            Item("reasoning", parts=[["Two ", "lookups."]], encrypted="gAAA"),
            Item("message", ["Looking ", "it up."]),
            Item("function_call", ['{"term":', ' "Muffet"}'], name="kb_types_of", call_id="c1"),
        ]
    )
    responses_types.Response.model_validate(turn.response())
    events = pydantic.TypeAdapter(responses_types.ResponseStreamEvent)
    for number, event in enumerate(turn.events()):
        events.validate_python({**event, "sequence_number": number})
    said = generate(rng, unknown=False)
    anthropic_types.Message.model_validate(said.message)
    raw = pydantic.TypeAdapter(anthropic_types.RawMessageStreamEvent)
    for name, data in said.events:
        if name != "ping":
            raw.validate_python(data)
    local = [chunk("Hi", thinking="hm"), chunk(tool_calls=[tool_call("f", {"a": 1})]), final()]
    for piece in [*local, merged(local)]:
        ollama_types.ChatResponse.model_validate(piece)


# -- tool_choice, as each wire documents it (#62) ------------------------------------------

CHOICES = {
    "none": ("none", "none"),
    "required": ("required", "required"),
    "kb_query": (
        {"type": "function", "function": {"name": "kb_query"}},
        {"type": "function", "name": "kb_query"},
    ),
}


@pytest.mark.parametrize("choice", sorted(CHOICES))
@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_choice_goes_out_as_the_official_openai_types_take_it(
    choice: str, stream: bool
) -> None:
    chat, responses = CHOICES[choice]
    body = json.loads(
        chat_body(
            neutral(tool_choice=choice), model="m", max_tokens_field="max_tokens", stream=stream
        )
    )
    without_reasoning(body)  # the one extension (see the module docstring)
    assert conforms(body, _hint(chat_params, "CompletionCreateParams", stream)) == []
    assert body["tool_choice"] == chat
    request = _after_a_turn(tool_choice=choice)
    body = json.loads(responses_body(request, model="m", store=False, stream=stream))
    assert conforms(body, _hint(responses_params, "ResponseCreateParams", stream)) == []
    assert body["tool_choice"] == responses
    auto = json.loads(responses_body(_after_a_turn(), model="m", store=False, stream=stream))
    assert "tool_choice" not in auto  # "auto" is sent as nothing


def test_the_messages_api_sends_no_tools_for_none_and_refuses_a_forced_tool() -> None:
    body = json.loads(msgspec.json.encode(build_body(neutral(tool_choice="none"))))
    assert conforms(body, _hint(beta_messages_params, "MessageCreateParams", False)) == []
    assert "tools" not in body
    assert "tool_choice" not in body
    for forced in ("required", "kb_query"):
        with pytest.raises(LLMEncode, match="the Messages API cannot send this 'tool_choice'"):
            build_body(neutral(tool_choice=forced))


@pytest.mark.parametrize("choice", ["none", "required", "kb_query"])
def test_ollama_takes_no_tool_choice_and_none_sends_no_tools(choice: str) -> None:
    request = Request(messages=[Message(role="user", content="q")], tools=TOOLS, tool_choice=choice)
    body = json.loads(ollama_body(request, model="m", num_ctx=4096, keep_alive="30m", stream=False))
    ollama_types.ChatRequest.model_validate(body)
    assert _named_only(body, ollama_types.ChatRequest, "body") == []
    assert ("tools" in body) is (choice != "none")
