"""The request on the wire (``POST {base}/chat/completions``), and the codec the skeleton drives.

What goes out (:func:`chat_body`)
    ``model`` (the request's, else the provider's, else none: a server
    serving one model answers with it); ``messages``; the token limit as
    ``max_completion_tokens`` where the far end is OpenAI's own API
    (``api.openai.com``, an ``*.openai.azure.com`` deployment), whose
    reasoning models refuse ``max_tokens``, and as ``max_tokens`` anywhere
    else, since vLLM, llama.cpp's server, LM Studio, SGLang, TGI and Ollama
    all read that one (a provider's ``max_tokens_field`` overrides the
    choice); ``temperature`` only when the request names one (OpenAI's
    GPT-5 and o-series models refuse any but their default, so none is
    sent for them to refuse); ``reasoning_effort`` from ``effort``, as
    OpenAI, vLLM and llama.cpp's server read it; ``stop``, ``tools`` and
    ``response_format`` when the request has them; on a streamed turn ``stream`` and
    ``stream_options: {"include_usage": true}`` (the usage comes in a last
    chunk).

Messages
    ``system`` first; a user message's text as a ``user`` message and each
    tool result as a ``tool`` message naming its ``tool_call_id``, in order;
    an assistant message as one message with its text as ``content`` and its
    tool calls as ``tool_calls`` (``{"id", "type": "function", "function":
    {"name", "arguments"}}``, a call this wire made sent back as it came),
    and its thinking as ``reasoning_content``, or ``reasoning`` where the
    server sent it so (DeepSeek's thinking mode refuses a tool loop's next
    turn without it; llama.cpp's server reads it for interleaved thinking):
    on by default, off for OpenAI's own API, which has no field for it
    (:func:`send_reasoning`; a provider's ``send_reasoning`` or
    ``VAELII_OPENAI_SEND_REASONING`` turns it off for a server that refuses
    it). Redacted thinking has no text to send and is left out. A block the
    wire has no shape for (a vendor's opaque block, a tool result from the
    assistant, a tool call from the user) is :class:`~vaelii_llm.errors.LLMEncode`.

Images and documents
    A user message holding an image or a document is sent as a list of
    content parts: an image as ``image_url`` (its bytes as a ``data:`` URL,
    a URL as given); a PDF as OpenAI's ``file`` part (``file_data`` as a
    ``data:`` URL, ``filename`` its title); a text document as a ``text``
    part. A server without the ``file`` part answers 400 (``LLMApiError``
    with its words): it is sent rather than refused, since OpenAI's API and
    the gateways in front of it take it and a wire-level guess cannot tell
    them apart; a PDF by URL has no shape (``file`` takes bytes) and is
    refused. A ``tool`` message takes text only on this wire, so a tool
    result's images and documents go in a ``user`` message right after the
    tool messages, named by the call's id, and its ``tool`` message says so:
    refusing them would leave an image-returning tool unusable on every
    such server.
    What is checked before sending is
    :data:`~vaelii_llm.providers.openai._shared.MEDIA` (OpenAI's documented
    image types and request payload).

Tools and format
    A tool is ``{"type": "function", "function": {name, description,
    parameters, strict}}`` (``strict`` only when the schema sets it). A
    ``format`` JSON schema is ``response_format: {"type": "json_schema",
    "json_schema": {"name", "schema", "strict"}}``, strict only where every
    object in it lists all its properties as required and admits no others
    (OpenAI refuses a strict schema that does not); one already in that
    shape is sent as given. ``tool_choice`` goes out with the tools:
    ``"none"`` and ``"required"`` as words, a name as ``{"type": "function",
    "function": {"name"}}``, ``"auto"`` as nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any
from typing import Final
from typing import Literal

import msgspec

from vaelii_llm import _backends
from vaelii_llm import errors
from vaelii_llm._base_url import BaseURL
from vaelii_llm._media import check_document
from vaelii_llm._media import check_image
from vaelii_llm._protocol import Block
from vaelii_llm._protocol import DocumentBlock
from vaelii_llm._protocol import ImageBlock
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import OpaqueBlock
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import system_text
from vaelii_llm._protocol import unhandled_block
from vaelii_llm._transport.settings import Endpoint
from vaelii_llm._wire.sse import SSEFrames
from vaelii_llm.providers._http import NetworkOptions
from vaelii_llm.providers.openai._assemble import WHOLE_DECODER
from vaelii_llm.providers.openai._assemble import ChunkAssembler
from vaelii_llm.providers.openai._assemble import Completion
from vaelii_llm.providers.openai._assemble import not_sse
from vaelii_llm.providers.openai._assemble import response_of
from vaelii_llm.providers.openai._server import ServerCodec
from vaelii_llm.providers.openai._shared import HEADERS
from vaelii_llm.providers.openai._shared import MEDIA
from vaelii_llm.providers.openai._shared import response_format
from vaelii_llm.providers.openai._shared import tool_choice

__all__ = [
    "CHAT_PATH",
    "TOKEN_FIELDS",
    "ChatCodec",
    "Options",
    "chat_body",
    "endpoint",
    "send_reasoning",
    "token_field",
]

CHAT_PATH: Final = "/chat/completions"
"""Where a turn is POSTed, below the base URL."""

ReasoningField = Literal["reasoning_content", "reasoning"]
REASONING_JOIN: Final = "\n\n"
"""What joins an assistant message's thinking blocks into its one reasoning field."""

TokenField = Literal["max_tokens", "max_completion_tokens"]
TOKEN_FIELDS: Final[tuple[TokenField, ...]] = ("max_tokens", "max_completion_tokens")
"""The two names the wire has for the token limit."""

_OPENAI_HOSTS: Final = ("api.openai.com", ".openai.azure.com")
"""The far ends that are OpenAI's own API (a host, or a host suffix)."""


class Options(NetworkOptions, total=False):
    """What a provider is built from, each optional (None: unset).

    ``base_url``: default ``OPENAI_BASE_URL``. ``api_key``: default
    ``OPENAI_API_KEY``; none is fine (a local server). ``model``: default
    ``VAELII_OPENAI_MODEL``; none sends none. ``headers``: sent on every
    request (a gateway's own; their ``Authorization`` beats the key's), never
    logged or shown. ``max_tokens_field``: ``"max_tokens"`` or
    ``"max_completion_tokens"``, instead of the choice by host (:func:`token_field`).
    ``send_reasoning``: whether thinking goes back (:func:`send_reasoning`).
    ``proxy``, ``ssl``, ``max_connections``, ``session``: how it reaches the
    server, as on every HTTP backend (:class:`~vaelii_llm.providers._http.NetworkOptions`).
    """

    base_url: str | None
    api_key: str | None
    model: str | None
    headers: Mapping[str, str] | None
    max_tokens_field: str | None
    send_reasoning: bool | None


def token_field(base: BaseURL, explicit: str | None = None) -> TokenField:
    """The name the token limit travels under: ``explicit`` when given (one of
    :data:`TOKEN_FIELDS`, else ValueError), ``max_completion_tokens`` for
    OpenAI's own API, ``max_tokens`` for every other server."""
    if explicit is not None:
        for name in TOKEN_FIELDS:
            if explicit == name:
                return name
        raise ValueError(f"max_tokens_field is one of {TOKEN_FIELDS}, not {explicit!r}")
    return "max_completion_tokens" if _is_openai(base) else "max_tokens"


def _is_openai(base: BaseURL) -> bool:
    """Whether ``base`` is OpenAI's own API (:data:`_OPENAI_HOSTS`)."""
    return base.host == _OPENAI_HOSTS[0] or base.host.endswith(_OPENAI_HOSTS[1])


def send_reasoning(base: BaseURL, explicit: bool | None = None) -> bool:
    """Whether an assistant message's thinking goes back: ``explicit`` when
    given, else ``VAELII_OPENAI_SEND_REASONING`` when set, else on for every
    server but OpenAI's own API, which sends no reasoning on this wire and
    takes no field for it."""
    chosen = _backends.openai_send_reasoning(explicit)
    return chosen if chosen is not None else not _is_openai(base)


def endpoint(base: BaseURL) -> Endpoint:
    """How the server at ``base`` is named in messages (a password cut)."""
    return Endpoint.at("the Chat Completions API", base.shown, "openai", HEADERS)


class _Function(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    description: str
    parameters: dict[str, Any]
    strict: bool | None = None


class _Tool(msgspec.Struct, frozen=True):
    type: str
    function: _Function


class _OutFunction(msgspec.Struct, frozen=True):
    name: str
    arguments: str


class _OutToolCall(msgspec.Struct, frozen=True):
    id: str
    type: str
    function: _OutFunction


class _OutMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    role: str
    content: str | list[dict[str, Any]] | None
    tool_calls: list[_OutToolCall | dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class _StreamOptions(msgspec.Struct, frozen=True):
    include_usage: bool


class _ChatRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    messages: list[_OutMessage]
    model: str | None = None
    temperature: float | None = None
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: list[str] | None = None
    tools: list[_Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    stream: bool | None = None
    stream_options: _StreamOptions | None = None


_ENCODER: Final = msgspec.json.Encoder()
_INCLUDE_USAGE: Final = _StreamOptions(include_usage=True)


def _wire_tool(tool: ToolSchema) -> _Tool:
    function = _Function(
        name=tool.name,
        description=tool.description,
        parameters=tool.input_schema,
        strict=tool.strict,
    )
    return _Tool(type="function", function=function)


def _tool_call(block: ToolUseBlock) -> _OutToolCall | dict[str, Any]:
    """The call as this wire sent it when it came from this wire (its ``raw``
    is a ``function`` call whose arguments are a string, and names the same
    call), so the arguments go back as the model wrote them; else built from
    the block (another vendor's ``raw`` is no shape this wire reads)."""
    raw = block.raw
    if raw is not None and raw.get("type") == "function" and raw.get("id") == block.id:
        function = raw.get("function")
        if (
            type(function) is dict
            and type(function.get("arguments")) is str
            and function.get("name") == block.name
        ):
            return raw
    arguments = _ENCODER.encode(block.input).decode()
    return _OutToolCall(
        id=block.id, type="function", function=_OutFunction(name=block.name, arguments=arguments)
    )


def _reasoning_field(block: ThinkingBlock) -> ReasoningField:
    """The field ``block``'s thinking goes back in: the one it came in on this
    wire (its ``raw`` is ``{field: text}``), else ``reasoning_content``."""
    raw = block.raw
    if raw is not None and len(raw) == 1 and raw.get("reasoning") == block.thinking:
        return "reasoning"
    return "reasoning_content"


def _assistant(blocks: list[Block], label: str, reasoning: bool) -> _OutMessage:
    texts: list[str] = []
    calls: list[_OutToolCall | dict[str, Any]] = []
    thoughts: list[str] = []
    field: ReasoningField = "reasoning_content"
    for block in blocks:
        match block:
            case TextBlock():
                texts.append(block.text)
            case ToolUseBlock():
                calls.append(_tool_call(block))
            case ThinkingBlock():
                if reasoning and block.thinking:
                    if not thoughts:
                        field = _reasoning_field(block)
                    thoughts.append(block.thinking)
            case RedactedThinkingBlock():
                pass  # no text to send: only its own vendor reads it
            case ToolResultBlock() | OpaqueBlock() | ImageBlock() | DocumentBlock():
                raise errors.LLMEncode(block.type, label)
            case _:
                raise unhandled_block(block, label)
    text = "".join(texts)
    thought = REASONING_JOIN.join(thoughts) or None
    return _OutMessage(
        role="assistant",
        content=text if text or not calls else None,
        tool_calls=calls or None,
        reasoning_content=thought if field == "reasoning_content" else None,
        reasoning=thought if field == "reasoning" else None,
    )


def _user(blocks: list[Block], label: str) -> list[_OutMessage]:
    out: list[_OutMessage] = []
    texts: list[str] = []
    parts: list[dict[str, Any]] | None = None  # set once an image or a document comes
    late: list[dict[str, Any]] = []  # the tool results' images, after the tool messages
    for block in blocks:
        match block:
            case TextBlock():
                texts.append(block.text)
            case ToolResultBlock():
                if texts or parts:
                    out.append(_user_message(texts, parts))
                    texts, parts = [], None
                content = _tool_text(block, late, label)
                out.append(
                    _OutMessage(role="tool", content=content, tool_call_id=block.tool_use_id)
                )
            case ImageBlock() | DocumentBlock():
                if parts is None:
                    parts = []
                if texts:
                    parts.append({"type": "text", "text": "".join(texts)})
                    texts = []
                parts.append(_media_part(block, label))
            case ThinkingBlock() | RedactedThinkingBlock() | ToolUseBlock() | OpaqueBlock():
                raise errors.LLMEncode(block.type, label)
            case _:
                raise unhandled_block(block, label)
    if late:
        parts = late + (parts or [])
    if texts or parts or not out:
        out.append(_user_message(texts, parts))
    return out


def _user_message(texts: list[str], parts: list[dict[str, Any]] | None) -> _OutMessage:
    """A user message: a string when it is text alone, else its parts."""
    if parts is None:
        return _OutMessage(role="user", content="".join(texts))
    if texts:
        parts.append({"type": "text", "text": "".join(texts)})
    return _OutMessage(role="user", content=parts)


def _tool_text(block: ToolResultBlock, late: list[dict[str, Any]], label: str) -> str:
    """A tool result's text for the ``tool`` message (a string as it is); a
    content list's images and documents join ``late``, after a text part
    naming the call they came from."""
    content = block.content
    if isinstance(content, str):
        return content
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    for part in content:
        match part:
            case TextBlock():
                texts.append(part.text)
            case ImageBlock() | DocumentBlock():
                images.append(_media_part(part, label))
            case _:
                raise unhandled_block(part, label)
    text = "".join(texts)
    if images:
        late.append({"type": "text", "text": f"What tool call {block.tool_use_id} returned:"})
        late.extend(images)
        note = f"({len(images)} attachment(s) follow in the next user message)"
        text = f"{text}\n{note}" if text else note
    return text


def _media_part(block: ImageBlock | DocumentBlock, label: str) -> dict[str, Any]:
    """An image as an ``image_url`` part, a document as a ``file`` or ``text``
    part, checked against :data:`MEDIA` first."""
    if isinstance(block, ImageBlock):
        check_image(block, MEDIA, label)
        url = block.url if block.url is not None else _data_url(block.media_type, block.data)
        return {"type": "image_url", "image_url": {"url": url}}
    if block.url is not None:
        raise errors.LLMEncode(
            "document", label, reason="this wire takes a document's bytes, not a URL"
        )
    check_document(block, MEDIA, label)
    if block.text is not None:
        text = block.text if block.title is None else f"{block.title}\n\n{block.text}"
        return {"type": "text", "text": text}
    file = {
        "filename": block.title or "document.pdf",
        "file_data": _data_url(block.media_type, block.data),
    }
    return {"type": "file", "file": file}


def _data_url(media_type: str | None, data: bytes | None) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data or b'').decode('ascii')}"


def _messages(request: Request, label: str, reasoning: bool) -> list[_OutMessage]:
    out: list[_OutMessage] = []
    system = system_text(request.system)
    if system:
        out.append(_OutMessage(role="system", content=system))
    for message in request.messages:
        out.extend(_message(message, label, reasoning))
    return out


def _message(message: Message, label: str, reasoning: bool) -> list[_OutMessage]:
    if isinstance(message.content, str):
        return [_OutMessage(role=message.role, content=message.content)]
    if message.role == "assistant":
        return [_assistant(message.content, label, reasoning)]
    return _user(message.content, label)


def chat_body(
    request: Request,
    *,
    model: str | None,
    max_tokens_field: TokenField,
    stream: bool,
    send_reasoning: bool = True,
    label: str = "the Chat Completions API",
) -> bytes:
    """The ``/chat/completions`` body for ``request`` (the module docstring
    says what goes out); ``send_reasoning`` False sends no thinking back.
    Raises :class:`~vaelii_llm.errors.LLMEncode` for a block this wire has no
    shape for."""
    limit = request.max_tokens
    body = _ChatRequest(
        model=request.model or model,
        messages=_messages(request, label, send_reasoning),
        temperature=request.temperature,
        reasoning_effort=request.effort,
        max_tokens=limit if max_tokens_field == "max_tokens" else None,
        max_completion_tokens=limit if max_tokens_field == "max_completion_tokens" else None,
        stop=list(request.stop_sequences) or None,
        tools=[_wire_tool(t) for t in request.tools] or None,
        tool_choice=tool_choice(request) if request.tools else None,
        response_format=response_format(request.format) if request.format else None,
        stream=True if stream else None,
        stream_options=_INCLUDE_USAGE if stream else None,
    )
    return _ENCODER.encode(body)


class ChatCodec(ServerCodec):
    """``/chat/completions`` as the shared HTTP skeleton drives it (no I/O here).

    Built from a provider's :class:`Options`, each resolved once: the base
    URL, the key (checked: a control character is refused naming the header)
    and the model as :class:`ServerCodec` reads them, then the token field.
    """

    whole_decoder: Final = WHOLE_DECODER

    def __init__(self, options: Options) -> None:
        super().__init__(options, Options.__annotations__, "OpenAI", CHAT_PATH, endpoint)
        self.max_tokens_field = token_field(self.base, options.get("max_tokens_field"))
        self.send_reasoning = send_reasoning(self.base, options.get("send_reasoning"))

    def body(self, request: Request, *, stream: bool) -> bytes:
        return chat_body(
            request,
            model=self.model,
            max_tokens_field=self.max_tokens_field,
            stream=stream,
            send_reasoning=self.send_reasoning,
            label=self.endpoint.label,
        )

    def whole(self, parsed: Completion) -> Response:
        return response_of(parsed, self.endpoint.label)

    def stream_decoder(self) -> SSEFrames:
        return SSEFrames(self.endpoint.label, not_sse)

    def assembler(self, *, deltas: bool) -> ChunkAssembler:
        return ChunkAssembler(self.endpoint.label, deltas=deltas)
