"""The vendor-neutral request, response and :class:`Provider` protocol.

A caller's loop is written once against these types and runs on every backend.
Every key any code path sends is a field below; a backend maps them to its wire.

Request fields
    ``messages`` the conversation (:class:`Message`, a string or a list of blocks);
    ``system`` the system prompt; ``model`` (None: the backend's configured model);
    ``tools`` (:class:`ToolSchema`, as :func:`vaelii_llm.tools.schemas` builds them);
    ``max_tokens``; ``timeout_ms`` the whole turn's budget, headers and body;
    ``stop_sequences``; ``format`` a JSON schema the answer must match (Messages
    API ``output_config.format``, Ollama ``format``); ``effort`` (Messages API
    ``output_config.effort``); ``thinking_display`` (``"summarized"`` opts into
    readable reasoning, ``"omitted"`` is the API's default); ``temperature``
    (Ollama only, default 0; never sent to the Messages API, whose current
    models refuse it); ``num_ctx`` and ``keep_alive`` (Ollama only);
    ``fallbacks`` (Messages API: left :data:`UNSET`, the backend sends its
    default; ``None`` sends none, and no beta header).

Response fields
    ``content`` the blocks, in order; ``stop_reason`` as the far end named it
    (``end_turn``, ``tool_use``, ``max_tokens``, ``refusal``, ``stop``…): branch
    on it first, since a refusal comes with empty or partial content;
    ``stop_sequence``; ``stop_details`` (the refusal's details, when given);
    ``model``; ``id``; ``usage`` (:class:`Usage`, the host's own counts and
    durations).

Blocks
    :class:`TextBlock`, :class:`ThinkingBlock` (with its ``signature``),
    :class:`RedactedThinkingBlock`, :class:`ToolUseBlock`,
    :class:`ToolResultBlock`, and :class:`OpaqueBlock` for a vendor type this
    package does not model. Every block received from a far end keeps its
    original JSON in ``raw``; an encoder sends ``raw`` back unchanged when it is
    set, since the Messages API rejects an edited thinking block.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from types import TracebackType
from typing import Any, ClassVar, Literal, Protocol, Self, runtime_checkable

from msgspec import UNSET, Struct, UnsetType, field

__all__ = [
    "UNSET",
    "Block",
    "Message",
    "OpaqueBlock",
    "Provider",
    "ProviderBase",
    "RedactedThinkingBlock",
    "Request",
    "Response",
    "StreamItem",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolSchema",
    "ToolUseBlock",
    "UnsetType",
    "Usage",
]

Raw = dict[str, Any] | None


class TextBlock(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """Prose. ``citations`` stays in ``raw`` when the far end sends any."""

    type: ClassVar[str] = "text"
    text: str
    raw: Raw = None


class ThinkingBlock(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """Reasoning. ``signature`` must travel back with it, unedited."""

    type: ClassVar[str] = "thinking"
    thinking: str
    signature: str | None = None
    raw: Raw = None


class RedactedThinkingBlock(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """Reasoning the far end encrypted; only ``data`` is echoed back."""

    type: ClassVar[str] = "redacted_thinking"
    data: str
    raw: Raw = None


class ToolUseBlock(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """The model asks for a tool: ``input`` is the argument object."""

    type: ClassVar[str] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]
    raw: Raw = None


class ToolResultBlock(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """What a tool answered, sent back in a user message."""

    type: ClassVar[str] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False
    raw: Raw = None


class OpaqueBlock(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """A vendor block type this package does not model; it round-trips
    through ``raw`` and no encoder builds one from scratch."""

    type: str
    raw: dict[str, Any]


Block = (
    TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock | ToolResultBlock | OpaqueBlock
)


class Message(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """One turn of the conversation. A string content is one text block."""

    role: Literal["user", "assistant"]
    content: str | list[Block]


class ToolSchema(Struct, frozen=True, kw_only=True, omit_defaults=True, repr_omit_defaults=True):
    """A tool as the model sees it. ``strict`` asks the far end to require
    every declared property, so it is set only where every one is required."""

    name: str
    description: str
    input_schema: dict[str, Any]
    strict: bool | None = None


class Usage(Struct, frozen=True, kw_only=True, omit_defaults=True, repr_omit_defaults=True):
    """What the host measured. Fields a backend does not report stay None.

    Messages API: ``input_tokens``, ``output_tokens`` and the cache counts.
    Ollama: ``prompt_eval_count``, ``eval_count`` and the durations (ns).
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_duration: int | None = None
    eval_duration: int | None = None


class Request(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """One turn to run. Field meanings are in the module docstring."""

    messages: list[Message]
    system: str | None = None
    model: str | None = None
    tools: list[ToolSchema] = field(default_factory=list)
    max_tokens: int = 1024
    timeout_ms: int = 60_000
    stop_sequences: list[str] = field(default_factory=list)
    format: dict[str, Any] | None = None
    effort: str | None = None
    thinking_display: str | None = None
    temperature: float | None = None
    num_ctx: int | None = None
    keep_alive: str | None = None
    fallbacks: str | list[str] | UnsetType | None = UNSET


class Response(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """One finished turn. ``stream`` ends with the same value ``complete`` returns."""

    content: list[Block]
    stop_reason: str | None
    model: str | None = None
    id: str | None = None
    stop_sequence: str | None = None
    stop_details: dict[str, Any] | None = None
    usage: Usage = field(default_factory=Usage)


StreamItem = Block | Response


@runtime_checkable
class Provider(Protocol):
    """What every backend implements; an out-of-tree backend implements it too.

    ``stream`` is an async generator: it yields each content block once it is
    whole, then the final :class:`Response` (equal to what ``complete`` returns
    for the same turn). A caller that stops early should iterate under
    ``contextlib.aclosing`` so the HTTP response is released at once.
    """

    async def complete(self, request: Request) -> Response: ...

    def stream(self, request: Request) -> AsyncGenerator[StreamItem, None]: ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class ProviderBase:
    """The async-context-manager half of :class:`Provider`, for backends to inherit."""

    async def aclose(self) -> None:
        """Release what the provider holds. Closing twice is harmless."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
