"""The request on the wire (``/api/chat``), and the codec the shared skeleton drives.

* ``options.num_ctx`` is the context length, the caller's to set per request
  (default ``VAELII_OLLAMA_NUM_CTX``). Nothing here truncates; the caller
  sizes the prompt first.
* ``options.temperature`` defaults to 0 so an answer is reproducible;
  ``options.num_predict`` carries ``max_tokens``; ``format`` carries the
  request's JSON schema, which the sampler is constrained to.
* ``keep_alive`` is always sent (default ``VAELII_OLLAMA_KEEP_ALIVE``, see
  :mod:`vaelii_llm.config`): model load is most of a cold local turn, and the
  host's own 5-minute default evicts the model between one question and the
  next.
* Both switches are read at each turn, so a changed one holds from the next
  turn on. The request's own value beats the provider's, which beats the
  switch.
* ``think`` carries the request's ``think`` (on, off, or a level), sent
  only when set: a model that cannot think refuses any ``think``. A system
  prompt given as blocks goes as one string, their texts joined; a
  request's ``cache`` sends nothing (the host keeps its own prefix cache).
* Tools are re-shaped to ``{type: "function", function: {name, description,
  parameters}}`` with ``strict`` dropped; a tool result goes back as a
  ``tool`` role message naming its tool; a tool call Ollama made is sent back
  as it came (its ``raw``). Ollama takes no ``tool_choice``: ``"none"`` sends
  no tools, ``"required"`` or a name sends nothing (the agent loop says when
  a turn that asked for a call made none).
* A user message's images go in its ``images`` list (base64, no data-URL
  prefix); Ollama takes no URL (this codec fetches nothing), no document,
  and a tool result as text only: each is refused with
  :class:`~vaelii_llm.errors.LLMEncode` naming the block. Ollama documents
  no image type list or size limit (:data:`MEDIA`), so the host's own
  answer speaks for an image its model cannot read.
* Streaming is newline-delimited JSON (:mod:`vaelii_llm._wire.ndjson`),
  reassembled by :class:`~vaelii_llm.providers.ollama._assemble.ChatAssembler`
  into the Response ``complete`` returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from typing import Final

import msgspec

from vaelii_llm import _backends
from vaelii_llm import errors
from vaelii_llm._base_url import BaseURL
from vaelii_llm._base_url import ollama_base
from vaelii_llm._media import MAX_BASE64
from vaelii_llm._media import MB
from vaelii_llm._media import MediaLimits
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
from vaelii_llm._wire.ndjson import NDJSONDecoder
from vaelii_llm.providers._bearer import BearerKey
from vaelii_llm.providers._bearer import session_headers
from vaelii_llm.providers._http import NetworkOptions
from vaelii_llm.providers._http import SessionHeadersOnly
from vaelii_llm.providers.ollama._assemble import CHUNK_DECODER
from vaelii_llm.providers.ollama._assemble import ChatAssembler
from vaelii_llm.providers.ollama._assemble import ChatChunk
from vaelii_llm.providers.ollama._assemble import response_of

__all__ = [
    "CHAT_PATH",
    "MEDIA",
    "ChatCodec",
    "Options",
    "api_key",
    "base",
    "base_url",
    "chat_body",
    "endpoint",
]

CHAT_PATH: Final = "/api/chat"
"""Where a turn is POSTed, below the base URL: a provider's turns and :func:`warm`."""

MEDIA: Final = MediaLimits(
    image_types=None,
    image_base64=MAX_BASE64,
    image_limit=f"the {MAX_BASE64 // MB} MB per image sent to Ollama (it documents no limit)",
)
"""What Ollama takes as images: its API documents neither types nor a size, so
the largest block any backend here sends bounds it (a 1 GB image is not sent)."""


class Options(NetworkOptions, total=False):
    """What an Ollama provider is built from, each optional (None: unset).

    ``host``: see :func:`base_url`. ``model``: default ``VAELII_OLLAMA_MODEL``
    (see :mod:`vaelii_llm.config`). ``num_ctx``, ``keep_alive``: the provider's values for a
    request naming none; unset, ``VAELII_OLLAMA_NUM_CTX`` and
    ``VAELII_OLLAMA_KEEP_ALIVE`` are read at each turn. ``headers``: sent on
    every turn (a gateway's or proxy's own; their ``Authorization`` beats
    ``OLLAMA_API_KEY``'s), never logged or shown.
    ``proxy``, ``ssl``, ``max_connections``, ``session``: how it reaches
    the host, as on every HTTP backend (:class:`~vaelii_llm.providers._http.NetworkOptions`).
    """

    host: str | None
    model: str | None
    num_ctx: int | None
    keep_alive: str | None
    headers: Mapping[str, str] | None


def api_key() -> BearerKey | None:
    """``OLLAMA_API_KEY`` as the key every request sends, turns and probes
    (a hosted Ollama asks for it; a local one ignores it); None when unset.
    A control character in it is :class:`~vaelii_llm.errors.LLMBadCredential`."""
    found = _backends.ollama_api_key()
    return BearerKey(found, "OLLAMA_API_KEY") if found is not None else None


def base_url(host: str | None = None) -> str:
    """The Ollama base URL for ``host``: the argument, else ``VAELII_OLLAMA_HOST``,
    else ``OLLAMA_HOST`` unless it names a bind address (``0.0.0.0``, ``::``,
    ``*``), else the local default (:data:`~vaelii_llm._backends.DEFAULT_OLLAMA_HOST`);
    read as Ollama reads a host (:func:`~vaelii_llm._base_url.normalize_host`).
    Raises ValueError for a host that names none."""
    return base(host).url


def base(host: str | None = None) -> BaseURL:
    """:func:`base_url` read once, for a provider or a probe to use throughout."""
    return ollama_base(_backends.ollama_host(host))


def endpoint(base: BaseURL) -> Endpoint:
    """How the host at ``base`` is named in messages."""
    return Endpoint(label=f"Ollama at {base.shown}", slug="ollama")


class _FunctionSpec(msgspec.Struct, frozen=True):
    name: str
    description: str
    parameters: dict[str, Any]


class _Tool(msgspec.Struct, frozen=True):
    type: str
    function: _FunctionSpec


class _OutMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    role: str
    content: str
    thinking: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_name: str | None = None
    images: list[bytes] | None = None


class _Options(msgspec.Struct, frozen=True, omit_defaults=True):
    num_ctx: int
    temperature: float
    num_predict: int | None = None
    stop: list[str] | None = None


class _ChatRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    model: str
    messages: list[_OutMessage]
    stream: bool
    keep_alive: str
    options: _Options
    tools: list[_Tool] | None = None
    format: dict[str, Any] | None = None
    think: bool | str | None = None


_ENCODER: Final = msgspec.json.Encoder()


def _wire_tool(tool: ToolSchema) -> _Tool:
    spec = _FunctionSpec(name=tool.name, description=tool.description, parameters=tool.input_schema)
    return _Tool(type="function", function=spec)


def _tool_call(block: ToolUseBlock) -> dict[str, Any]:
    """The call as Ollama sent it when it came from Ollama (its ``raw`` has a
    ``function`` whose arguments are an object), else built from the block: a
    call another vendor made carries that vendor's JSON in ``raw`` (the Chat
    Completions wire's arguments are a string), which this wire cannot read."""
    function = block.raw.get("function") if block.raw is not None else None
    if isinstance(function, dict) and isinstance(function.get("arguments"), dict):
        return block.raw  # type: ignore[return-value]
    return {"function": {"name": block.name, "arguments": block.input}}


def _assistant_message(blocks: Iterable[Block], label: str) -> _OutMessage:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        match block:
            case TextBlock():
                texts.append(block.text)
            case ThinkingBlock():
                thoughts.append(block.thinking)
            case ToolUseBlock():
                calls.append(_tool_call(block))
            case (
                RedactedThinkingBlock()
                | ToolResultBlock()
                | OpaqueBlock()
                | ImageBlock()
                | DocumentBlock()
            ):
                raise errors.LLMEncode(block.type, label)
            case _:
                raise unhandled_block(block, label)
    return _OutMessage(
        role="assistant",
        content="".join(texts),
        thinking="".join(thoughts) or None,
        tool_calls=calls or None,
    )


def _messages(request: Request, label: str) -> list[_OutMessage]:
    out: list[_OutMessage] = []
    system = system_text(request.system)
    if system:
        out.append(_OutMessage(role="system", content=system))
    tool_names: dict[str, str] = {}
    for message in request.messages:
        out.extend(_message(message, tool_names, label))
    return out


def _message(message: Message, tool_names: dict[str, str], label: str) -> list[_OutMessage]:
    if isinstance(message.content, str):
        return [_OutMessage(role=message.role, content=message.content)]
    if message.role == "assistant":
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                tool_names[block.id] = block.name
        return [_assistant_message(message.content, label)]
    out: list[_OutMessage] = []
    texts: list[str] = []
    images: list[bytes] = []
    for block in message.content:
        match block:
            case TextBlock():
                texts.append(block.text)
            case ToolResultBlock():
                if texts or images:
                    out.append(
                        _OutMessage(role="user", content="".join(texts), images=images or None)
                    )
                    texts, images = [], []
                out.append(
                    _OutMessage(
                        role="tool",
                        content=_result_text(block, label),
                        tool_name=tool_names.get(block.tool_use_id),
                    )
                )
            case ImageBlock():
                images.append(_image(block, label))
            case DocumentBlock():
                raise errors.LLMEncode(
                    "document", label, reason="Ollama has no document input; send its text instead"
                )
            case ThinkingBlock() | RedactedThinkingBlock() | ToolUseBlock() | OpaqueBlock():
                raise errors.LLMEncode(block.type, label)
            case _:
                raise unhandled_block(block, label)
    if texts or images or not out:
        out.append(_OutMessage(role="user", content="".join(texts), images=images or None))
    return out


def _image(block: ImageBlock, label: str) -> bytes:
    """An image's bytes for a message's ``images`` (msgspec writes them base64)."""
    if block.data is None:
        raise errors.LLMEncode(
            "image", label, reason="Ollama takes an image's bytes, not a URL; fetch it first"
        )
    check_image(block, MEDIA, label)
    return block.data


def _result_text(block: ToolResultBlock, label: str) -> str:
    """A tool result's text: Ollama's ``tool`` message is text only."""
    content = block.content
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        match part:
            case TextBlock():
                texts.append(part.text)
            case ImageBlock() | DocumentBlock():
                raise errors.LLMEncode(
                    part.type, label, reason="Ollama takes a tool result as text only"
                )
            case _:
                raise unhandled_block(part, label)
    return "".join(texts)


def chat_body(
    request: Request,
    *,
    model: str,
    num_ctx: int,
    keep_alive: str,
    stream: bool,
    label: str = "Ollama",
) -> bytes:
    """The ``/api/chat`` body for ``request`` (``model``, ``num_ctx`` and
    ``keep_alive`` already resolved; the request's own values win).

    ``keep_alive``, ``options.num_ctx``, ``options.num_predict`` and
    ``options.temperature`` (0 unless the request names one) are always sent;
    ``tools``, ``format``, ``think`` and ``options.stop`` only when the
    request has them.
    Raises :class:`~vaelii_llm.errors.LLMEncode` for a block this wire has no
    shape for (redacted thinking, a vendor's opaque block, a tool result in an
    assistant message); a ``think`` Ollama does not take is refused where the request is made.
    """
    options = _Options(
        num_ctx=request.num_ctx if request.num_ctx is not None else num_ctx,
        temperature=request.temperature if request.temperature is not None else 0.0,
        num_predict=request.max_tokens,
        stop=list(request.stop_sequences) or None,
    )
    body = _ChatRequest(
        model=request.model or model,
        messages=_messages(request, label),
        stream=stream,
        keep_alive=request.keep_alive or keep_alive,
        options=options,
        tools=(
            [_wire_tool(t) for t in request.tools] or None
            if request.tool_choice != "none"
            else None
        ),
        format=request.format,
        think=request.think,
    )
    return _ENCODER.encode(body)


class ChatCodec(SessionHeadersOnly):
    """``/api/chat`` as the shared HTTP skeleton drives it (no I/O here).

    Built from a provider's :class:`Options`: the host and the model are
    resolved here, once; ``num_ctx`` and ``keep_alive``, when unset, at each
    turn (:meth:`body`).
    """

    whole_decoder: Final = CHUNK_DECODER

    def __init__(self, options: Options) -> None:
        unknown = options.keys() - Options.__annotations__.keys()
        if unknown:  # as a keyword signature refuses it
            raise TypeError(f"unexpected Ollama option(s): {', '.join(sorted(unknown))}")
        where = base(options.get("host"))
        self.base_url = where.url
        self.model = _backends.ollama_model(options.get("model"))
        self.shown_url = where.shown
        self.endpoint = endpoint(where)
        self.url = where.at(CHAT_PATH)
        self._num_ctx = options.get("num_ctx")
        self._keep_alive = options.get("keep_alive")
        self._headers = session_headers(api_key(), options.get("headers"))

    def body(self, request: Request, *, stream: bool) -> bytes:
        return chat_body(
            request,
            model=self.model,
            num_ctx=_backends.ollama_num_ctx(self._num_ctx),
            keep_alive=_backends.ollama_keep_alive(self._keep_alive),
            stream=stream,
            label=self.endpoint.label,
        )

    def whole(self, parsed: ChatChunk) -> Response:
        return response_of(parsed, self.endpoint.label)

    def stream_decoder(self) -> NDJSONDecoder:
        return NDJSONDecoder(self.endpoint.label)

    def assembler(self, *, deltas: bool) -> ChatAssembler:
        return ChatAssembler(self.endpoint.label, deltas=deltas)
