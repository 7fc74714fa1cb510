"""The request on the wire (``POST {base}/responses``, and ``/responses/input_tokens`` to count).

What goes out (:func:`responses_body`)
    ``model`` (the request's, else the provider's, else none: a server
    serving one model answers with it); ``input``, the items below;
    ``instructions`` from ``system``; ``max_output_tokens``; ``temperature``
    only when the request names one (OpenAI's reasoning models refuse it);
    ``tools`` as ``function`` tools, each naming ``strict`` (False unless the
    schema asks for it: an absent one reads as True on OpenAI's API);
    ``tool_choice`` with them (``"none"``/``"required"`` as words, a name as
    ``{"type": "function", "name"}``, ``"auto"`` as nothing);
    ``text.format`` a ``json_schema`` for
    ``format`` (strict where the schema is closed, as on Chat Completions);
    ``reasoning.effort`` from ``effort`` and ``reasoning.summary: "auto"`` for
    ``thinking_display="summarized"``; ``store: false`` unless the provider
    was built with ``store=True`` (the caller's messages are the history: no
    ``previous_response_id`` is ever sent), and with it ``include:
    ["reasoning.encrypted_content"]``, so the reasoning comes back in the only
    form a stateless far end can read back; ``stream`` on a streamed turn. A
    count sends the same minus what it takes no part of (``max_output_tokens``,
    ``temperature``, ``store``, ``include``, ``stream``).

Refused before sending (:class:`~vaelii_llm.errors.LLMEncode`)
    ``stop_sequences``: the wire has no field for them, and a turn that
    silently ran past one would not be the turn asked for.

Input items
    A message whose content is text alone is ``{"type": "message", "role",
    "content": text}`` (llama.cpp's server refuses an assistant message
    without its ``type``; OpenAI takes it either way).
    A user message's images and documents make its content a list of parts:
    ``input_text``, ``input_image`` (its bytes as a ``data:`` URL, or a URL as
    given), ``input_file`` (a PDF's bytes as ``file_data``; a text document is
    an ``input_text`` part), checked against the Chat Completions wire's
    :data:`~vaelii_llm.providers.openai._shared.MEDIA` (OpenAI's one documented
    limit). A tool result is a ``function_call_output`` item naming its
    ``call_id``, its ``output`` a string, or a list of parts when it holds
    images or documents. An assistant message is its items in order: each
    output item this wire sent goes back whole, as it came (a ``message``
    with its ``id`` and ``phase``, which the official client says to resend
    on every assistant message, a ``function_call`` with its ``id`` and the
    arguments as the model wrote them); text built or edited goes as an
    assistant message, each tool call built as a ``function_call`` item;
    reasoning this wire sent with ``encrypted_content`` as the very
    item it came as (so a reasoning model keeps its chain across tool calls
    with nothing stored); other reasoning is dropped, since a stateless far
    end can read back only the encrypted form. An
    :class:`~vaelii_llm._protocol.OpaqueBlock` goes back as its ``raw`` item.
"""

from __future__ import annotations

import base64
from typing import Any
from typing import Final

import msgspec

from vaelii_llm import errors
from vaelii_llm._media import check_document
from vaelii_llm._media import check_image
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
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import system_text
from vaelii_llm._protocol import unhandled_block
from vaelii_llm.providers.openai._shared import MEDIA
from vaelii_llm.providers.openai._shared import response_format
from vaelii_llm.providers.openai._shared import tool_choice

__all__ = ["COUNT_PATH", "RESPONSES_PATH", "responses_body"]

RESPONSES_PATH: Final = "/responses"
"""Where a turn is POSTed, below the base URL."""
COUNT_PATH: Final = "/responses/input_tokens"
"""Where a token count is POSTed, below the base URL."""

_ENCODER: Final = msgspec.json.Encoder()
_ENCRYPTED: Final = ["reasoning.encrypted_content"]
"""``include`` when nothing is stored: the reasoning comes back encrypted, to
be sent back (servers of the Azure/Foundry kind send it only when asked)."""
_SUMMARY: Final = {"summarized": "auto"}
"""``thinking_display`` → ``reasoning.summary``; ``"omitted"`` asks for none."""


class _Body(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    model: str | None = None
    instructions: str | None = None
    input: list[dict[str, Any]]
    max_output_tokens: int | None = None
    temperature: float | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, str] | None = None
    store: bool | None = None
    include: list[str] | None = None
    stream: bool | None = None


def _tool(tool: ToolSchema) -> dict[str, Any]:
    """A ``function`` tool; ``strict`` always named (the official type requires
    it, and an absent one reads as strict there, which a schema that does not
    require every property is refused under)."""
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.input_schema,
        "strict": bool(tool.strict),
    }


def _text_format(schema: dict[str, Any]) -> dict[str, Any]:
    """``text`` for a ``format`` schema: Chat Completions' ``json_schema``
    wrapper (one rule for the name and for strictness), flattened as this
    wire takes it."""
    wrapped = response_format(schema)
    inner = wrapped.get("json_schema")
    return {"format": {"type": "json_schema", **(inner if type(inner) is dict else {})}}


def _reasoning(request: Request) -> dict[str, str] | None:
    out: dict[str, str] = {}
    if request.effort is not None:
        out["effort"] = request.effort
    summary = _SUMMARY.get(request.thinking_display or "")
    if summary is not None:
        out["summary"] = summary
    return out or None


def _data_url(media_type: str | None, data: bytes | None) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data or b'').decode('ascii')}"


def _media(block: ImageBlock | DocumentBlock, label: str) -> dict[str, Any]:
    """An image as ``input_image``, a document as ``input_file`` or
    ``input_text``, checked against the documented limits first."""
    if isinstance(block, ImageBlock):
        check_image(block, MEDIA, label)
        url = block.url if block.url is not None else _data_url(block.media_type, block.data)
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    if block.url is not None:
        return {"type": "input_file", "file_url": block.url}
    check_document(block, MEDIA, label)
    if block.text is not None:
        text = block.text if block.title is None else f"{block.title}\n\n{block.text}"
        return {"type": "input_text", "text": text}
    return {
        "type": "input_file",
        "filename": block.title or "document.pdf",
        "file_data": _data_url(block.media_type, block.data),
    }


def _output(block: ToolResultBlock, label: str) -> str | list[dict[str, Any]]:
    """A tool result's ``output``: a string, or parts once it holds media."""
    content = block.content
    if isinstance(content, str):
        return content
    parts = [_input_part(part, label) for part in content]
    if all(isinstance(part, TextBlock) for part in content):  # no media: one string
        return "".join(part["text"] for part in parts)
    return parts


def _input_part(block: TextBlock | ImageBlock | DocumentBlock, label: str) -> dict[str, Any]:
    """A text, image or document block as a message's input part."""
    match block:
        case TextBlock():
            return {"type": "input_text", "text": block.text}
        case ImageBlock() | DocumentBlock():
            return _media(block, label)
        case _:
            raise unhandled_block(block, label)


def _user(blocks: list[Block], label: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []

    def flush() -> None:
        if parts:
            texts_only = all(part["type"] == "input_text" for part in parts)
            content: Any = "".join(p["text"] for p in parts) if texts_only else list(parts)
            out.append({"type": "message", "role": "user", "content": content})
            parts.clear()

    for block in blocks:
        match block:
            case TextBlock() | ImageBlock() | DocumentBlock():
                parts.append(_input_part(block, label))
            case ToolResultBlock():
                flush()
                out.append(
                    {
                        "type": "function_call_output",
                        "call_id": block.tool_use_id,
                        "output": _output(block, label),
                    }
                )
            case ThinkingBlock() | RedactedThinkingBlock() | ToolUseBlock() | OpaqueBlock():
                raise errors.LLMEncode(block.type, label)
            case _:
                raise unhandled_block(block, label)
    flush()
    return out or [{"type": "message", "role": "user", "content": ""}]


def _call(block: ToolUseBlock) -> dict[str, Any]:
    """A ``function_call`` item: the item whole when the block came from this
    wire (its ``raw`` is that call: its ``id`` and the arguments as the model
    wrote them go back), else built."""
    raw = block.raw
    if (
        raw is not None
        and raw.get("type") == "function_call"
        and raw.get("call_id") == block.id
        and raw.get("name") == block.name
        and type(raw.get("arguments")) is str
    ):
        return raw
    return {
        "type": "function_call",
        "call_id": block.id,
        "name": block.name,
        "arguments": _ENCODER.encode(block.input).decode(),
    }


def _message_item(block: TextBlock) -> dict[str, Any] | None:
    """The assistant ``message`` item ``block`` came as on this wire (its
    ``raw``, whose text parts make the block's text), or None: a built or
    edited block is sent as text."""
    raw = block.raw
    if raw is None or raw.get("type") != "message" or raw.get("role") != "assistant":
        return None
    content = raw.get("content")
    if type(content) is not list or any(type(part) is not dict for part in content):
        return None
    texts = [part.get("text") for part in content if part.get("type") == "output_text"]
    return raw if "".join(map(str, texts)) == block.text else None


def _assistant(blocks: list[Block], label: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts: list[str] = []

    def flush() -> None:
        if texts:
            out.append({"type": "message", "role": "assistant", "content": "".join(texts)})
            texts.clear()

    for block in blocks:
        match block:
            case TextBlock():
                item = _message_item(block)
                if item is None:
                    texts.append(block.text)
                else:
                    flush()
                    out.append(item)
            case ToolUseBlock():
                flush()
                out.append(_call(block))
            case ThinkingBlock() | RedactedThinkingBlock():
                raw = block.raw
                if (
                    raw is not None
                    and raw.get("type") == "reasoning"
                    and raw.get("encrypted_content")
                ):
                    flush()
                    out.append(raw)
            case OpaqueBlock():
                if block.raw.get("type") != block.type:
                    raise errors.LLMEncode(block.type, label)
                flush()
                out.append(block.raw)
            case ToolResultBlock() | ImageBlock() | DocumentBlock():
                raise errors.LLMEncode(block.type, label)
            case _:
                raise unhandled_block(block, label)
    flush()
    return out


def _items(message: Message, label: str) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        return [{"type": "message", "role": message.role, "content": message.content}]
    if message.role == "assistant":
        return _assistant(message.content, label)
    return _user(message.content, label)


def responses_body(
    request: Request,
    *,
    model: str | None,
    store: bool,
    stream: bool,
    count: bool = False,
    label: str = "the Responses API",
) -> bytes:
    """The ``/responses`` body for ``request`` (the module docstring says what
    goes out), or with ``count`` the ``/responses/input_tokens`` one. Raises
    :class:`~vaelii_llm.errors.LLMEncode` for what this wire has no shape for."""
    if request.stop_sequences:
        raise errors.LLMEncode(
            "stop_sequences", label, reason="the Responses API takes no stop sequences"
        )
    items: list[dict[str, Any]] = []
    for message in request.messages:
        items.extend(_items(message, label))
    body = _Body(
        model=request.model or model,
        instructions=system_text(request.system) or None,
        input=items,
        max_output_tokens=None if count else request.max_tokens,
        temperature=None if count else request.temperature,
        tools=[_tool(t) for t in request.tools] or None,
        tool_choice=tool_choice(request, nested=False) if request.tools else None,
        text=_text_format(request.format) if request.format else None,
        reasoning=_reasoning(request),
        store=None if count else store,
        include=None if count or store else _ENCRYPTED,
        stream=True if stream and not count else None,
    )
    return _ENCODER.encode(body)
