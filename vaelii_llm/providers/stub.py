"""The deterministic, scripted default provider: no key, no socket, no model.

A test drives a caller's loop through ``script``, the turns to hand back, one per
call (``complete`` and ``stream`` both take a turn). Each entry is a
:class:`~vaelii_llm._protocol.Response` or a shorthand:

``"prose"``
    a text block, ``stop_reason="end_turn"``.
``{"tool": "kb_types_of", "input": {...}}``
    one tool_use block (``id`` optional; numbered ``stub_tool_N`` otherwise),
    ``stop_reason="tool_use"``. ``{"tools": [{...}, {...}]}`` asks for several.
``{"text": "…", "stop_reason": "max_tokens"}``
    a text block with the stop reason given (one of
    :data:`~vaelii_llm._protocol.StopReason`; another word is a ValueError).
``{"refusal": "partial text"}``
    ``stop_reason="refusal"`` with that partial text, or no block when empty.
``{"raise": "llm-timeout"}``
    raises the :mod:`~vaelii_llm.errors` class of that ``type`` (an
    :class:`~vaelii_llm.errors.LLMError` instance in the script is raised as is).

Past the script, every turn answers ``default`` (an empty end-of-turn response
unless given). ``expand`` is called on each mapping entry first (strings,
Responses, errors and the empty default are not passed to it), so a caller with
answer shapes of its own maps them to one of the above. ``requests()`` and
``last_user_text()`` read back what the loop sent.

``stream(request, deltas=True)`` yields a text or thinking block's words as
deltas, and a tool call's start and its input's JSON in pieces, before the
whole block, as an HTTP backend does. After ``aclose`` every turn raises
:class:`~vaelii_llm.errors.LLMClosed`. Its turns are traced as any
backend's are when :mod:`vaelii_llm.telemetry` is on and it is handed out by
selection or a vote pool.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any
from typing import Final
from typing import get_args

import msgspec

from vaelii_llm import errors
from vaelii_llm._protocol import Block
from vaelii_llm._protocol import Delta
from vaelii_llm._protocol import ProviderBase
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StopReason
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ThinkingDelta
from vaelii_llm._protocol import ToolInputDelta
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart

__all__ = ["StubProvider", "available", "provider"]

_JSON: Final = msgspec.json.Encoder()

MODEL = "stub"
LABEL = "the stub"
_STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))
_WORDS = re.compile(r"\S+\s*|\s+")

Entry = Any
"""A script entry: a Response, a shorthand string or mapping, or an LLMError."""


def _scripted_error(kind: str) -> errors.LLMError:
    """An instance of the error class named by its spec ``type``."""
    label = LABEL
    builders: dict[str, Callable[[], errors.LLMError]] = {
        "llm-api-error": lambda: errors.LLMApiError(label, 500, "scripted failure"),
        "llm-bad-answer": lambda: errors.LLMBadAnswer("a scripted type", [], "scripted failure"),
        "llm-bad-credential": lambda: errors.LLMBadCredential("x-api-key"),
        "llm-bad-hosts": lambda: errors.LLMBadHosts("scripted failure"),
        "llm-bad-response": lambda: errors.LLMBadResponse(label, "answered a scripted bad body"),
        "llm-closed": lambda: errors.LLMClosed(label),
        "llm-encode": lambda: errors.LLMEncode("scripted", label),
        "llm-no-credential": lambda: errors.LLMNoCredential("scripted"),
        "llm-pool-timeout": lambda: errors.LLMPoolTimeout(label, 0),
        "llm-timeout": lambda: errors.LLMTimeout(label, 0),
        "llm-unreachable": lambda: errors.LLMUnreachable(label, "scripted failure"),
        "llm-unsupported": lambda: errors.LLMUnsupported(label, "a scripted operation"),
    }
    if kind not in builders:
        raise ValueError(f"the stub knows no error type {kind!r}; one of {sorted(builders)}")
    return builders[kind]()


class StubProvider(ProviderBase):
    """A provider that answers from a script. Safe to share within one event loop."""

    model: str = MODEL
    """The model its answers name."""

    def __init__(
        self,
        script: Iterable[Entry] = (),
        default: Entry = None,
        expand: Callable[[Entry], Entry] | None = None,
    ) -> None:
        self._script = list(script)
        self._default = default
        self._expand = expand
        self._requests: list[Request] = []
        self._tool_ids = 0
        self._closed = False

    async def aclose(self) -> None:
        """Refuse every later turn. Closing twice is harmless."""
        self._closed = True

    def requests(self) -> list[Request]:
        """Every request sent so far, oldest first."""
        return list(self._requests)

    def last_user_text(self) -> str | None:
        """The text of the newest user message of the newest request, or None."""
        if not self._requests:
            return None
        for message in reversed(self._requests[-1].messages):
            if message.role != "user":
                continue
            if isinstance(message.content, str):
                return message.content
            texts = [b.text for b in message.content if isinstance(b, TextBlock)]
            if texts:
                return "\n".join(texts)
        return None

    async def complete(self, request: Request) -> Response:
        return self._turn(request)

    async def stream(
        self, request: Request, *, deltas: bool = False
    ) -> AsyncGenerator[StreamItem, None]:
        response = self._turn(request)
        for index, block in enumerate(response.content):
            if deltas:
                for delta in _deltas(index, block):
                    yield delta
            yield block
        yield response

    def _turn(self, request: Request) -> Response:
        if self._closed:
            raise errors.LLMClosed(LABEL)
        self._requests.append(request)
        index = len(self._requests) - 1
        entry = self._script[index] if index < len(self._script) else self._default
        if self._expand is not None and isinstance(entry, Mapping):
            entry = self._expand(entry)
        return self._build(entry)

    def _build(self, entry: Entry) -> Response:
        if entry is None:
            return Response(content=[], stop_reason="end_turn", model=MODEL)
        if isinstance(entry, Response):
            return entry
        if isinstance(entry, errors.LLMError):
            raise entry
        if isinstance(entry, str):
            return Response(content=[TextBlock(text=entry)], stop_reason="end_turn", model=MODEL)
        if isinstance(entry, Mapping):
            return self._build_mapping(entry)
        raise TypeError(f"the stub cannot answer a {type(entry).__name__} script entry")

    def _build_mapping(self, entry: Mapping[str, Any]) -> Response:
        if "raise" in entry:
            raise _scripted_error(str(entry["raise"]))
        if "refusal" in entry:
            partial = str(entry["refusal"] or "")
            content: list[Block] = [TextBlock(text=partial)] if partial else []
            return Response(content=content, stop_reason="refusal", model=MODEL)
        if "tool" in entry or "tools" in entry:
            calls = entry.get("tools", [entry])
            blocks: list[Block] = []
            if entry.get("text"):
                blocks.append(TextBlock(text=str(entry["text"])))
            blocks.extend(self._tool_use(call) for call in calls)
            return Response(content=blocks, stop_reason="tool_use", model=MODEL)
        if "text" in entry:
            return Response(
                content=[TextBlock(text=str(entry["text"]))],
                stop_reason=_stop_reason(entry.get("stop_reason", "end_turn")),
                model=MODEL,
            )
        raise ValueError(f"the stub knows no shorthand with keys {sorted(entry)}")

    def _tool_use(self, call: Mapping[str, Any]) -> ToolUseBlock:
        self._tool_ids += 1
        tool_id = str(call.get("id") or f"stub_tool_{self._tool_ids}")
        return ToolUseBlock(id=tool_id, name=str(call["tool"]), input=dict(call.get("input") or {}))


def _stop_reason(word: object) -> StopReason:
    if word not in _STOP_REASONS:
        raise ValueError(f"the stub's stop_reason must be one of {sorted(_STOP_REASONS)}")
    return word  # type: ignore[return-value]  # checked against the Literal's values


def _deltas(index: int, block: Block) -> Iterator[Delta]:
    """What an HTTP backend would yield before ``block``: its words, or its
    start and its input's JSON in pieces (one a member)."""
    if isinstance(block, TextBlock):
        for word in _WORDS.findall(block.text):
            yield TextDelta(index=index, text=word)
    elif isinstance(block, ThinkingBlock):
        for word in _WORDS.findall(block.thinking):
            yield ThinkingDelta(index=index, thinking=word)
    elif isinstance(block, ToolUseBlock):
        yield ToolUseStart(index=index, id=block.id, name=block.name)
        if block.input:
            members = [_JSON.encode({k: v})[1:-1].decode() for k, v in block.input.items()]
            pieces = ["{" + members[0], *("," + m for m in members[1:]), "}"]
            for piece in pieces:
                yield ToolInputDelta(index=index, partial_json=piece)


def provider(
    script: Iterable[Entry] = (),
    default: Entry = None,
    expand: Callable[[Entry], Entry] | None = None,
) -> StubProvider:
    """A stub provider that answers ``script`` one turn per call, then ``default``."""
    return StubProvider(script=script, default=default, expand=expand)


async def available() -> bool:
    """The stub is always available."""
    return True
