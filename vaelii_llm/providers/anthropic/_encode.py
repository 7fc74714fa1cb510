"""Request encoding for the Messages API (pure).

What goes out (:func:`build_body`)
    ``model`` (default :data:`DEFAULT_MODEL`), ``max_tokens``, ``messages``,
    ``system``, ``tools``, ``stop_sequences``; ``thinking`` always
    ``{"type": "adaptive"}`` (no token budget; the request's
    ``thinking_display`` is added as ``display``); ``output_config.effort``
    (the request's ``effort``, else the provider's, default
    :data:`DEFAULT_EFFORT`) and ``output_config.format`` (the request's
    ``format`` JSON schema, wrapped as ``{"type": "json_schema", "schema": …}``);
    ``fallbacks: "default"`` with the :data:`FALLBACK_BETA` header unless the
    request sets ``fallbacks=None``. The fields in :data:`NEVER_SENT` are
    never sent: this model family refuses ``temperature``, ``top_p`` and
    ``top_k``, and a forced tool: ``tool_choice`` ``"required"`` or a tool's
    name is refused with :class:`~vaelii_llm.errors.LLMEncode` before sending,
    and ``"none"`` sends no tools. A system prompt given as text blocks goes
    as a list of ``text`` blocks; the request's ``cache`` is written as
    ``cache_control`` (:mod:`._cache`); Ollama's ``think`` is not sent.

Counting tokens (:func:`count_body`)
    The same body, less what only a turn takes: ``max_tokens``,
    ``stop_sequences``, ``fallbacks`` (and its beta) and ``stream``.

Blocks
    A block carrying ``raw`` of its own type is sent back exactly as received
    (the API rejects an edited thinking block, and an unmodelled vendor block
    round-trips this way). A built block, or one whose ``raw`` another backend
    wrote, is written from its fields; one of a type the encoder has no shape
    for (an :class:`~vaelii_llm._protocol.OpaqueBlock` with an empty ``raw``,
    a foreign class) is refused with :class:`~vaelii_llm.errors.LLMEncode`.

Images and documents
    An image is an ``image`` block whose ``source`` is ``base64`` (with its
    ``media_type``) or ``url``; a document is a ``document`` block whose
    ``source`` is ``base64`` (a PDF), ``url`` (a PDF) or ``text``
    (``text/plain``), with its ``title`` when set. A tool result's content
    list is sent as a list of such blocks and ``text`` blocks. What the API
    takes is :data:`MEDIA` (its documented image types and per-image size,
    and the request size a document must fit); a block outside it is refused
    with ``LLMEncode`` naming the limit, before any byte is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from typing import Final

import msgspec

from vaelii_llm._media import MB
from vaelii_llm._media import WEB_IMAGE_TYPES
from vaelii_llm._media import MediaLimits
from vaelii_llm._media import check_document
from vaelii_llm._media import check_image
from vaelii_llm._protocol import UNSET
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
from vaelii_llm._protocol import unhandled_block
from vaelii_llm.errors import LLMEncode
from vaelii_llm.providers.anthropic._cache import apply_cache
from vaelii_llm.providers.anthropic._credentials import Credential

__all__ = [
    "DEFAULT_EFFORT",
    "DEFAULT_MODEL",
    "FALLBACK_BETA",
    "MEDIA",
    "NEVER_SENT",
    "betas",
    "build_body",
    "count_body",
    "encode_block",
]

DEFAULT_MODEL: Final = "claude-opus-5-5"
DEFAULT_EFFORT: Final = "medium"
"""One level below claude-opus-5's own default; a caller wanting deeper
reasoning sends ``effort``."""
FALLBACK_BETA: Final = "server-side-fallback-2026-07-01"
NEVER_SENT: Final = frozenset({"temperature", "top_p", "top_k", "tool_choice"})
_IMAGE_BASE64: Final = 5 * MB  # the API measures an image as the base64 string it receives
_REQUEST_BYTES: Final = 32 * MB
MEDIA: Final = MediaLimits(
    image_types=WEB_IMAGE_TYPES,
    image_base64=_IMAGE_BASE64,
    image_limit=f"the Messages API's {_IMAGE_BASE64 // MB} MB per image",
    document_base64=_REQUEST_BYTES,
    document_limit=f"the Messages API's {_REQUEST_BYTES // MB} MB request size",
)
"""What the Messages API takes as images and documents, from its documentation."""


def encode_block(block: Block, label: str = "the Messages API") -> dict[str, Any]:
    """One content block as the API takes it: ``raw`` unchanged when set and
    of the block's type (another vendor's raw, such as an Ollama tool call's,
    is no Messages API block, so the block is built from its fields)."""
    raw = getattr(block, "raw", None)
    if raw and raw.get("type") == getattr(block, "type", None):
        return raw  # type: ignore[no-any-return]
    out: dict[str, Any]
    match block:
        case TextBlock():
            return {"type": "text", "text": block.text}
        case ThinkingBlock():
            out = {"type": "thinking", "thinking": block.thinking}
            if block.signature is not None:
                out["signature"] = block.signature
            return out
        case RedactedThinkingBlock():
            return {"type": "redacted_thinking", "data": block.data}
        case ToolUseBlock():
            return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
        case ToolResultBlock():
            content = block.content
            out = {
                "type": "tool_result",
                "tool_use_id": block.tool_use_id,
                "content": content if isinstance(content, str) else _result_list(content, label),
            }
            if block.is_error:
                out["is_error"] = True
            return out
        case ImageBlock() | DocumentBlock():
            return _media_block(block, label)
        case OpaqueBlock():  # its raw is of its type (above) or it has no wire shape
            raise LLMEncode(block.type, label)
        case _:
            raise unhandled_block(block, label)


def _result_list(
    content: Sequence[TextBlock | ImageBlock | DocumentBlock], label: str
) -> list[dict[str, Any]]:
    """A tool result's content list: its text, image and document blocks (the
    API's ``tool_result`` content takes no other kind this package builds)."""
    out = []
    for part in content:
        match part:
            case TextBlock() | ImageBlock() | DocumentBlock():
                out.append(encode_block(part, label))
            case _:
                raise unhandled_block(part, label)
    return out


def _media_block(block: ImageBlock | DocumentBlock, label: str) -> dict[str, Any]:
    """An ``image`` or ``document`` block with its ``source``, checked
    against :data:`MEDIA` (bytes go out base64-encoded: msgspec writes them so)."""
    source: dict[str, Any]
    if isinstance(block, ImageBlock):
        check_image(block, MEDIA, label)
        if block.url is not None:
            source = {"type": "url", "url": block.url}
        else:
            source = {"type": "base64", "media_type": block.media_type, "data": block.data}
        return {"type": "image", "source": source}
    check_document(block, MEDIA, label)
    if block.text is not None:
        source = {"type": "text", "media_type": "text/plain", "data": block.text}
    elif block.url is not None:
        source = {"type": "url", "url": block.url}
    else:
        source = {"type": "base64", "media_type": block.media_type, "data": block.data}
    out = {"type": "document", "source": source}
    if block.title is not None:
        out["title"] = block.title
    return out


def _encode_message(message: Message, label: str) -> dict[str, Any]:
    content = message.content
    if isinstance(content, str):
        return {"role": message.role, "content": content}
    return {"role": message.role, "content": [encode_block(b, label) for b in content]}


def _output_format(schema: dict[str, Any]) -> dict[str, Any]:
    # A JSON schema never has type "json_schema", so an already wrapped one is recognisable.
    if schema.get("type") == "json_schema" and "schema" in schema:
        return schema
    return {"type": "json_schema", "schema": schema}


_SENT_CHOICES: Final = frozenset({"auto", "none"})
"""The ``tool_choice`` values this wire sends: ``"none"`` as no tools."""
_FORCED: Final = (
    "its models refuse a forced tool (tool_choice 'required' or a tool's name); "
    "ask for 'auto' or 'none'"
)


def build_body(
    request: Request,
    *,
    model: str = DEFAULT_MODEL,
    effort: str = DEFAULT_EFFORT,
    stream: bool = False,
    label: str = "the Messages API",
) -> dict[str, Any]:
    """The JSON body for ``request`` (the module docstring says what goes out)."""
    body: dict[str, Any] = {
        "model": request.model or model,
        "max_tokens": request.max_tokens,
        "messages": [_encode_message(m, label) for m in request.messages],
    }
    system = request.system
    if system is not None:
        body["system"] = (
            system if isinstance(system, str) else [encode_block(b, label) for b in system]
        )
    if request.tool_choice not in _SENT_CHOICES:
        raise LLMEncode("tool_choice", label, reason=_FORCED)
    if request.tools and request.tool_choice != "none":
        body["tools"] = [msgspec.to_builtins(t) for t in request.tools]
    if request.stop_sequences:
        body["stop_sequences"] = list(request.stop_sequences)
    thinking: dict[str, Any] = {"type": "adaptive"}
    if request.thinking_display is not None:
        thinking["display"] = request.thinking_display
    body["thinking"] = thinking
    output_config: dict[str, Any] = {"effort": request.effort or effort}
    if request.format is not None:
        output_config["format"] = _output_format(request.format)
    body["output_config"] = output_config
    if request.fallbacks is UNSET:
        body["fallbacks"] = "default"
    elif request.fallbacks is not None:
        body["fallbacks"] = request.fallbacks
    if stream:
        body["stream"] = True
    if request.cache is not None:
        apply_cache(body, request.cache, label)
    return body


_TURN_ONLY: Final = ("max_tokens", "stop_sequences", "fallbacks", "stream")
"""What a turn's body holds that the counting endpoint does not take."""


def count_body(
    request: Request,
    *,
    model: str = DEFAULT_MODEL,
    effort: str = DEFAULT_EFFORT,
    label: str = "the Messages API",
) -> dict[str, Any]:
    """The JSON body ``/v1/messages/count_tokens`` takes for ``request``: the
    turn's, by the same rules, less :data:`_TURN_ONLY`."""
    body = build_body(request, model=model, effort=effort, label=label)
    for key in _TURN_ONLY:
        body.pop(key, None)
    return body


def betas(request: Request, credential: Credential | None = None) -> tuple[str, ...]:
    """The ``anthropic-beta`` values the turn needs: the credential's (OAuth),
    then the fallback beta unless the request drops fallbacks."""
    found = list(credential.betas) if credential is not None else []
    if request.fallbacks is not None:
        found.append(FALLBACK_BETA)
    return tuple(found)
