"""pydantic-ai faces: a ``Model`` over any vaelii Provider, and the read surface as a toolset.

:class:`VaeliiModel` lets a pydantic-ai ``Agent`` run on the stub, on Ollama or on
the Messages API, with this package's deadlines, typed errors and refusal
handling; :class:`KBToolset` offers a KB's read tools to any agent. Install with
``pip install 'vaelii-llm[pydantic-ai]'``.

The mapping, both ways:

* request: the system prompt parts and the agent's instructions become
  ``Request.system``; user text, images and documents (``BinaryContent``,
  ``ImageUrl``, a PDF's ``DocumentUrl``; a text file's bytes as its text),
  assistant text, tool calls (with their ids) and tool returns become blocks
  (audio and video are a ``UserError``); a tool return whose outcome is an error
  (``failed`` or ``retried``) is a ``tool_result`` with ``is_error`` and its text
  unwrapped; a thinking part this model produced goes back as the block it came
  from (its ``raw`` JSON, signature included, unedited), redacted thinking too;
  a vendor block the package does not model rides in the response's
  ``provider_details`` and goes back in its place. Settings: ``max_tokens``,
  ``temperature``, ``stop_sequences`` and ``timeout`` (seconds, the whole turn);
  the ones this model ignores are in :attr:`VaeliiModel.unsupported_settings`.
* response: text, thinking (signature, ``raw``), tool calls; usage (input,
  output and cache counts, the host's other counts and durations in
  ``details``); the neutral stop reason as pydantic-ai's finish reason
  (``refusal`` is ``content_filter``, so an agent raises ``ContentFilterError``
  for a refusal with no answer, as it does for its own Anthropic model), the
  vendor's word in ``provider_details['finish_reason']`` and the refusal's
  explanation in ``provider_details['refusal']``; the model that served. A tool
  call cut by ``max_tokens`` is never offered to the agent: the turn raises
  ``IncompleteToolCall``; a ``pause_turn`` response is ``suspended``, so the agent
  sends it back for the far end to continue, as pydantic-ai's Anthropic model does.
* errors: ``LLMApiError`` is pydantic-ai's ``ModelHTTPError`` (with its category,
  e.g. ``ModelRateLimitError`` for a 429) carrying the status; a timeout is
  ``ModelTimeoutError``, an unreachable host ``ModelConnectionError``, a body
  that will not parse ``UnexpectedModelBehavior``, a missing credential or a
  closed provider ``UserError``. The vaelii error is always ``__cause__``, and
  no message quotes more than the excerpt of far-end text
  (:data:`vaelii_llm.errors.EXCERPT_CHARS`).

:class:`KBToolset` answers a refused call (a shape, a bound, an unknown name) by
raising pydantic-ai's ``ToolFailed``: the model reads the refusal as an error
tool return (``is_error`` on the wire) and tries again, and the run's retry
budget is not spent on it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from contextlib import aclosing
from contextlib import asynccontextmanager
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC
from datetime import datetime
from typing import Any
from typing import ClassVar
from typing import Final

import msgspec
from pydantic_ai import exceptions as pai_errors
from pydantic_ai import messages as pai
from pydantic_ai.models import Model
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models import StreamedResponse
from pydantic_ai.models import check_allow_model_requests
from pydantic_ai.profiles import ModelProfileSpec
from pydantic_ai.settings import ModelSettingName
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets import ToolsetTool
from pydantic_ai.usage import RequestUsage
from pydantic_core import SchemaValidator
from pydantic_core import core_schema

from vaelii_llm import errors
from vaelii_llm._media import PDF
from vaelii_llm._protocol import Block
from vaelii_llm._protocol import DocumentBlock
from vaelii_llm._protocol import ImageBlock
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import OpaqueBlock
from vaelii_llm._protocol import Provider
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StopReason
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ThinkingDelta
from vaelii_llm._protocol import ToolInputDelta
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm._protocol import Usage
from vaelii_llm.errors import excerpt
from vaelii_llm.tools import Toolset

__all__ = ["KBToolset", "VaeliiModel"]

FINISH_REASONS: Final[dict[StopReason, pai.FinishReason | None]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_call",
    "refusal": "content_filter",
    "pause_turn": None,
}
"""The neutral stop reason as pydantic-ai's finish reason."""

_RAW: Final = "vaelii_raw"
_REDACTED: Final = "redacted_thinking"
_OPAQUE: Final = "vaelii_opaque_blocks"
_ANY_ARGS: Final = SchemaValidator(core_schema.any_schema())
"""The arguments reach the Toolset as the model sent them: its refusals say more
than a schema validator's, and never spend a retry."""


# -- the model -------------------------------------------------------------------------


class VaeliiModel(Model):
    """A pydantic-ai ``Model`` over any vaelii :class:`~vaelii_llm._protocol.Provider`.

    ``model_name`` names the model in each request (``None``: the backend's
    configured model, and the name reported is the provider's ``model`` when it
    has one). The caller owns the provider: close it (``async with``) when done.
    """

    unsupported_settings: ClassVar[frozenset[ModelSettingName]] = frozenset(
        {
            "top_p",
            "top_k",
            "max_retries",
            "parallel_tool_calls",
            "seed",
            "presence_penalty",
            "frequency_penalty",
            "logit_bias",
            "extra_headers",
            "extra_body",
            "service_tier",
            "citations",
        }
    )
    """What this model does not send. pydantic-ai warns when a run sets one that
    changes what a request guarantees (``max_retries``, ``extra_headers``,
    ``parallel_tool_calls=False``…) and ignores the tuning knobs quietly."""

    def __init__(
        self,
        provider: Provider,
        *,
        model_name: str | None = None,
        settings: ModelSettings | None = None,
        profile: ModelProfileSpec | None = None,
    ) -> None:
        super().__init__(settings=settings, profile=profile)
        self.vaelii_provider = provider
        self._requested_model = model_name
        kind = type(provider).__module__.rsplit(".", 1)[-1]
        self._system = f"vaelii-{kind}"
        named = getattr(provider, "model", None)
        self._model_name = model_name or (named if isinstance(named, str) else kind)

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def system(self) -> str:
        return self._system

    async def request(
        self,
        messages: list[pai.ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> pai.ModelResponse:
        check_allow_model_requests()
        model_settings, model_request_parameters = self.prepare_request(
            model_settings, model_request_parameters
        )
        request = self._request(messages, model_settings, model_request_parameters)
        try:
            response = await self.vaelii_provider.complete(request)
        except errors.LLMError as exc:
            raise _framework_error(exc, self.model_name) from exc
        return self._response(response)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[pai.ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        check_allow_model_requests()
        model_settings, model_request_parameters = self.prepare_request(
            model_settings, model_request_parameters
        )
        request = self._request(messages, model_settings, model_request_parameters)
        items = self.vaelii_provider.stream(request, deltas=True)
        streamed = _VaeliiStream(
            model_request_parameters=model_request_parameters,
            _model=self,
            _items=items,
            _model_name=self.model_name,
        )
        async with aclosing(items):
            yield streamed

    # -- pydantic-ai -> vaelii

    def _request(
        self,
        messages: Sequence[pai.ModelMessage],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
    ) -> Request:
        system, turns = _turns(messages, self.system)
        instructions = _instructions(messages, params)
        prompt = "\n\n".join(p for p in (system, instructions) if p)
        tools = [
            ToolSchema(
                name=tool.name,
                description=tool.description or "",
                input_schema=dict(tool.parameters_json_schema),
                strict=tool.strict,
            )
            for tool in [*params.function_tools, *params.output_tools]
        ]
        opts: dict[str, Any] = {}
        given = settings or {}
        if "max_tokens" in given:
            opts["max_tokens"] = int(given["max_tokens"])
        if "temperature" in given:
            opts["temperature"] = float(given["temperature"])
        if given.get("stop_sequences"):
            opts["stop_sequences"] = list(given["stop_sequences"])
        timeout = given.get("timeout")
        if isinstance(timeout, int | float) and not isinstance(timeout, bool):
            opts["timeout_ms"] = max(1, int(timeout * 1000))
        return Request(
            messages=turns,
            system=prompt or None,
            model=self._requested_model,
            tools=tools,
            **opts,
        )

    # -- vaelii -> pydantic-ai

    def _response(self, response: Response) -> pai.ModelResponse:
        _refuse_partial_calls(response)
        parts: list[pai.ModelResponsePart] = []
        opaque: list[dict[str, Any]] = []
        for index, block in enumerate(response.content):
            part = self._part(block)
            if part is not None:
                parts.append(part)
            elif isinstance(block, OpaqueBlock):
                opaque.append({"index": index, "type": block.type, "raw": block.raw})
        return pai.ModelResponse(
            parts=parts,
            usage=_usage(response.usage),
            model_name=response.model or self.model_name,
            provider_name=self.system,
            provider_response_id=response.id,
            provider_details=_details(response, opaque),
            finish_reason=_finish_reason(response.stop_reason),
            state=_state(response.stop_reason),
        )

    def _part(self, block: Block) -> pai.ModelResponsePart | None:
        if isinstance(block, TextBlock):
            return pai.TextPart(content=block.text)
        if isinstance(block, ThinkingBlock):
            return pai.ThinkingPart(
                content=block.thinking,
                signature=block.signature,
                provider_name=self.system,
                provider_details=_raw_details(block.raw),
            )
        if isinstance(block, RedactedThinkingBlock):
            return pai.ThinkingPart(
                content="",
                id=_REDACTED,
                signature=block.data,
                provider_name=self.system,
                provider_details=_raw_details(block.raw),
            )
        if isinstance(block, ToolUseBlock):
            return pai.ToolCallPart(
                tool_name=block.name, args=dict(block.input), tool_call_id=block.id
            )
        return None


@dataclass
class _VaeliiStream(StreamedResponse):
    """One streamed turn: the provider's deltas become pydantic-ai's part events."""

    _model: VaeliiModel = field(repr=False)
    _items: AsyncGenerator[Any, None] = field(repr=False)
    _model_name: str = ""
    _timestamp: datetime = field(default_factory=lambda: datetime.now(UTC))
    _block_count: int = field(default=0, init=False)

    async def _get_event_iterator(self) -> AsyncIterator[pai.ModelResponseStreamEvent]:
        streamed: set[int] = set()  # block indexes whose content came as deltas
        started: set[int] = set()  # tool calls announced by a ToolUseStart
        received = False
        try:
            async for item in self._items:
                received = True
                for event in self._events(item, streamed, started):
                    yield event
        except errors.LLMError as exc:
            raise _framework_error(exc, self._model_name, streamed=True, received=received) from exc

    def _events(
        self, item: Any, streamed: set[int], started: set[int]
    ) -> Iterator[pai.ModelResponseStreamEvent]:
        parts = self._parts_manager
        system = self._model.system
        if isinstance(item, TextDelta):
            streamed.add(item.index)
            yield from parts.handle_text_delta(vendor_part_id=item.index, content=item.text)
        elif isinstance(item, ThinkingDelta):
            streamed.add(item.index)
            yield from parts.handle_thinking_delta(
                vendor_part_id=item.index, content=item.thinking, provider_name=system
            )
        elif isinstance(item, ToolUseStart):
            started.add(item.index)
            yield from parts.handle_tool_call_delta_events(
                vendor_part_id=item.index, tool_name=item.name, tool_call_id=item.id
            )
        elif isinstance(item, ToolInputDelta):
            if item.index in started:  # the arguments' JSON, a piece at a time
                streamed.add(item.index)
                yield from parts.handle_tool_call_delta_events(
                    vendor_part_id=item.index, args=item.partial_json
                )
        elif isinstance(item, Response):
            self._finish(item)
        else:
            yield from self._whole_block(item, streamed, started)

    def _whole_block(
        self, block: Block, streamed: set[int], started: set[int]
    ) -> Iterator[pai.ModelResponseStreamEvent]:
        """A block once it is whole; ``index`` is its position among the blocks so far."""
        parts = self._parts_manager
        system = self._model.system
        index = self._block_count
        self._block_count += 1
        if isinstance(block, TextBlock):
            if index not in streamed and block.text:
                yield from parts.handle_text_delta(vendor_part_id=index, content=block.text)
        elif isinstance(block, ThinkingBlock):
            yield from parts.handle_thinking_delta(
                vendor_part_id=index,
                content=None if index in streamed else block.thinking,
                signature=block.signature,
                provider_name=system,
                provider_details=_raw_details(block.raw),
            )
        elif isinstance(block, RedactedThinkingBlock):
            yield from parts.handle_thinking_delta(
                vendor_part_id=index,
                id=_REDACTED,
                signature=block.data,
                provider_name=system,
                provider_details=_raw_details(block.raw) or {},
            )
        elif isinstance(block, ToolUseBlock):
            if block.partial:
                return  # the final Response refuses the turn
            if index in started:
                if index not in streamed:  # no argument pieces came: the whole input
                    yield from parts.handle_tool_call_delta_events(
                        vendor_part_id=index, args=json.dumps(block.input)
                    )
            else:
                yield parts.handle_tool_call_part(
                    vendor_part_id=index,
                    tool_name=block.name,
                    args=dict(block.input),
                    tool_call_id=block.id,
                )

    def _finish(self, response: Response) -> None:
        _refuse_partial_calls(response)
        opaque = [
            {"index": i, "type": b.type, "raw": b.raw}
            for i, b in enumerate(response.content)
            if isinstance(b, OpaqueBlock)
        ]
        self._usage = _usage(response.usage)
        self.finish_reason = _finish_reason(response.stop_reason)
        if response.stop_reason == "pause_turn":
            self.state = "suspended"
        self.provider_details = _details(response, opaque)
        self.provider_response_id = response.id
        if response.model:
            self._model_name = response.model

    async def close_stream(self) -> None:
        await self._items.aclose()

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def provider_name(self) -> str:
        return self._model.system

    @property
    def provider_url(self) -> None:
        return None

    @property
    def timestamp(self) -> datetime:
        return self._timestamp


def _instructions(
    messages: Sequence[pai.ModelMessage], params: ModelRequestParameters
) -> str | None:
    """The agent's instructions in force: the request parameters' parts, or (for a
    direct ``model.request`` call) the newest request's ``instructions``."""
    if params.instruction_parts is not None:
        return pai.InstructionPart.join(params.instruction_parts)
    for message in reversed(messages):
        if isinstance(message, pai.ModelRequest):
            return message.instructions
    return None


def _turns(messages: Sequence[pai.ModelMessage], system_name: str) -> tuple[str, list[Message]]:
    """The system prompt and the conversation; consecutive turns of one role merge."""
    system: list[str] = []
    turns: list[Message] = []

    def add(role: Any, blocks: list[Block]) -> None:
        if not blocks:
            return
        if turns and turns[-1].role == role:
            previous = turns[-1].content
            assert isinstance(previous, list)
            turns[-1] = Message(role=role, content=[*previous, *blocks])
        else:
            turns.append(Message(role=role, content=blocks))

    for message in messages:
        if isinstance(message, pai.ModelRequest):
            results: list[Block] = []
            texts: list[Block] = []
            for part in message.parts:
                if isinstance(part, pai.SystemPromptPart):
                    system.append(part.content)
                elif isinstance(part, pai.UserPromptPart):
                    texts.extend(_user_blocks(part))
                elif isinstance(part, pai.ToolReturnPart):
                    results.append(
                        ToolResultBlock(
                            tool_use_id=part.tool_call_id,
                            content=part.model_response_str(wrap_if_error=False),
                            is_error=part.outcome in pai.ERROR_OUTCOMES,
                        )
                    )
                elif isinstance(part, pai.RetryPromptPart):  # legacy: prepare_messages translates
                    if part.tool_name is not None:
                        results.append(
                            ToolResultBlock(
                                tool_use_id=part.tool_call_id,
                                content=part.model_response(),
                                is_error=True,
                            )
                        )
                    else:
                        texts.append(TextBlock(text=part.model_response()))
            add("user", [*results, *texts])  # a tool result leads its user turn
        elif isinstance(message, pai.ModelResponse):
            add("assistant", _assistant_blocks(message, system_name))
    return "\n\n".join(s for s in system if s), turns


def _user_blocks(part: pai.UserPromptPart) -> Iterator[Block]:
    if isinstance(part.content, str):
        yield TextBlock(text=part.content)
        return
    for item in part.content:
        if isinstance(item, str):
            yield TextBlock(text=item)
        elif isinstance(item, pai.TextContent):
            yield TextBlock(text=item.content)
        elif isinstance(item, pai.CachePoint):
            continue
        else:
            try:
                block = _media_block(item)
            except ValueError as exc:
                refused = f"VaeliiModel cannot send this {_named(item)}: {exc}"
                raise pai_errors.UserError(refused) from exc
            yield block


def _media_block(item: object) -> Block:
    """An image or a document of a user prompt as this package's block; ValueError
    for what no backend here takes (audio, video) or bytes that are not what they say."""
    if isinstance(item, pai.ImageUrl):
        return ImageBlock(url=item.url)
    if isinstance(item, pai.DocumentUrl):
        kind = item.media_type  # inferred from the URL, or ValueError
        if kind == PDF:
            return DocumentBlock(url=item.url)
        raise ValueError(f"a document by URL is a PDF here, not {kind}")
    if isinstance(item, pai.BinaryContent) and item.is_image:
        return ImageBlock.from_bytes(item.data, item.media_type)
    if isinstance(item, pai.BinaryContent) and item.is_document:
        if item.media_type.startswith("text/"):  # CSV, Markdown, HTML...: the text itself
            try:
                return DocumentBlock(text=item.data.decode("utf-8"))
            except UnicodeDecodeError:
                raise ValueError(f"{item.media_type} bytes that are not UTF-8") from None
        return DocumentBlock.from_bytes(item.data, item.media_type)
    raise ValueError("it sends text, images and documents")


def _named(item: object) -> str:
    kind = getattr(item, "media_type", None) if isinstance(item, pai.BinaryContent) else None
    return f"{type(item).__name__} ({kind})" if kind else type(item).__name__


def _assistant_blocks(message: pai.ModelResponse, system_name: str) -> list[Block]:
    ours = message.provider_name == system_name
    blocks: list[Block] = []
    for part in message.parts:
        if isinstance(part, pai.TextPart):
            if part.content:
                blocks.append(TextBlock(text=part.content))
        elif isinstance(part, pai.ThinkingPart):
            block = _thinking_block(part, ours and part.provider_name == system_name)
            if block is not None:
                blocks.append(block)
        elif isinstance(part, pai.ToolCallPart):
            blocks.append(
                ToolUseBlock(id=part.tool_call_id, name=part.tool_name, input=part.args_as_dict())
            )
    if ours and message.provider_details and message.provider_details.get(_OPAQUE):
        for entry in message.provider_details[_OPAQUE]:
            opaque = OpaqueBlock(type=str(entry["type"]), raw=dict(entry["raw"]))
            blocks.insert(min(int(entry["index"]), len(blocks)), opaque)
    return blocks


def _thinking_block(part: pai.ThinkingPart, ours: bool) -> Block | None:
    """The block a thinking part came from, echoed back through ``raw`` when it
    was this model's; another model's reasoning has no signature here to travel
    with, so it is left out rather than forged."""
    if not ours:
        return None
    raw = (part.provider_details or {}).get(_RAW)
    raw = dict(raw) if isinstance(raw, dict) else None
    if part.id == _REDACTED:
        return RedactedThinkingBlock(data=part.signature or "", raw=raw)
    return ThinkingBlock(thinking=part.content, signature=part.signature, raw=raw)


def _raw_details(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    return {_RAW: raw} if raw is not None else None


def _refuse_partial_calls(response: Response) -> None:
    for block in response.content:
        if isinstance(block, ToolUseBlock) and block.partial:
            raise pai_errors.IncompleteToolCall(
                f"the turn ended on {response.stop_reason} inside the arguments of a call to "
                f"{block.name!r}, which is never run; raise max_tokens or ask for less"
            )


def _finish_reason(stop: StopReason | None) -> pai.FinishReason | None:
    return FINISH_REASONS.get(stop) if stop is not None else None


def _state(stop: StopReason | None) -> pai.ModelResponseState:
    """A paused turn (``pause_turn``) is suspended: the agent sends it back to be continued."""
    return "suspended" if stop == "pause_turn" else "complete"


def _details(response: Response, opaque: list[dict[str, Any]]) -> dict[str, Any] | None:
    details: dict[str, Any] = {}
    if response.vendor_stop_reason or response.stop_reason:
        details["finish_reason"] = response.vendor_stop_reason or response.stop_reason
    if response.stop_reason:
        details["stop_reason"] = response.stop_reason
    if response.stop_sequence:
        details["stop_sequence"] = response.stop_sequence
    stop_details = response.stop_details or {}
    if stop_details.get("explanation"):
        details["refusal"] = stop_details["explanation"]
    if stop_details.get("category"):
        details["refusal_category"] = stop_details["category"]
    if response.extra:
        details["extra"] = dict(response.extra)
    if opaque:
        details[_OPAQUE] = opaque
    return details or None


_COUNTED: Final = frozenset(
    {"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"}
)


def _usage(usage: Usage) -> RequestUsage:
    """Input, output and cache counts; the host's other whole-number fields in ``details``."""
    fields = msgspec.structs.asdict(usage)
    details = {
        k: v
        for k, v in fields.items()
        if k not in _COUNTED and isinstance(v, int) and not isinstance(v, bool)
    }
    details.update(
        (k, v)
        for k, v in (usage.extra or {}).items()
        if isinstance(v, int) and not isinstance(v, bool)
    )
    return RequestUsage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=usage.cache_read_input_tokens or 0,
        cache_write_tokens=usage.cache_creation_input_tokens or 0,
        details=details,
    )


def _framework_error(
    exc: errors.LLMError, model_name: str, *, streamed: bool = False, received: bool = False
) -> Exception:
    """pydantic-ai's own error for ``exc`` (raised ``from exc`` by the caller).

    ``in_stream`` is set for an error inside a stream that had opened: one that
    came after an item, or inside a 200 (an error event)."""
    if isinstance(exc, errors.LLMApiError):
        in_stream = streamed and (received or exc.status < 400)
        # An error inside a 200 (a body or a stream) gets the status the API
        # answers the same error with before a stream opens, as pydantic-ai does.
        status = exc.error_status or 0
        if status >= 400:
            return pai_errors.ModelHTTPError.for_category(
                _category(status),
                status_code=status,
                model_name=model_name,
                body=excerpt(exc.body),
                provider_error_type=exc.error_type,
                in_stream=in_stream,
            )
        return pai_errors.ModelAPIError(
            model_name,
            str(exc),
            body=excerpt(exc.body),
            provider_error_type=exc.error_type,
            in_stream=in_stream,
        )
    if isinstance(exc, errors.LLMTimeout):
        phase: Any = "pool" if exc.phase in ("acquire", "connection") else "read"
        return pai_errors.ModelTimeoutError(model_name, str(exc), phase=phase)
    if isinstance(exc, errors.LLMUnreachable):
        return pai_errors.ModelConnectionError(model_name, str(exc), phase="connect")
    if isinstance(exc, errors.LLMBadResponse):
        return pai_errors.UnexpectedModelBehavior(str(exc))
    return pai_errors.UserError(f"{exc.type}: {exc}")


def _category(status: int) -> Any:
    if status == 429:
        return pai_errors.ModelRateLimitError
    if status == 529:
        return pai_errors.ModelOverloadedError
    if status == 503:
        return pai_errors.ModelUnavailableError
    if status >= 500:
        return pai_errors.ModelServerError
    if status in (401, 403):
        return pai_errors.ModelAuthenticationError
    if status == 404:
        return pai_errors.ModelNotFoundError
    return pai_errors.ModelRequestRejectedError


# -- the toolset -----------------------------------------------------------------------


class KBToolset(AbstractToolset[Any]):
    """A KB's read surface as a pydantic-ai toolset: one tool per
    :meth:`Toolset.schemas <vaelii_llm.tools.Toolset.schemas>` entry, each call
    run by :meth:`Toolset.call <vaelii_llm.tools.Toolset.call>`.

    ``kb_or_toolset`` is a KB (a :class:`~vaelii_llm.tools.Toolset` is built over
    it) or a Toolset. A refusal raises ``ToolFailed``, which the model reads as
    an error tool return without spending the run's retries; ``max_retries``
    bounds only the framework's own retries (arguments that are not JSON).
    """

    def __init__(
        self,
        kb_or_toolset: Any,
        *,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        max_retries: int = 1,
        id: str | None = None,
    ) -> None:
        self.toolset = (
            kb_or_toolset if isinstance(kb_or_toolset, Toolset) else Toolset(kb_or_toolset)
        )
        self._only = None if only is None else list(only)
        self._exclude = None if exclude is None else list(exclude)
        self._max_retries = max_retries
        self._id = id

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        return {
            schema.name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=schema.name,
                    description=schema.description,
                    parameters_json_schema=dict(schema.input_schema),
                    strict=schema.strict,
                ),
                max_retries=self._max_retries,
                args_validator=_ANY_ARGS,
            )
            for schema in self.toolset.schemas(self._only, self._exclude)
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> str:
        result = await self.toolset.call(name, tool_args)
        if not result.ok:
            raise pai_errors.ToolFailed(result.text)
        return result.text
