"""The tool loop, written once: a model reads a KB (a :class:`~vaelii_llm.tools.Toolset`)
and any other :class:`~vaelii_llm.tools.ToolSource`, such as an MCP server's tools.

``vaelii-llm ask``, the web backend example and any caller run this one loop.
Each turn it streams the model's answer and branches on ``stop_reason`` first:

``tool_use``
    every ``tool_use`` block runs through the toolset (a ``partial`` one, cut
    by ``max_tokens``, is never run: it gets an error result instead); the
    assistant content goes back through its blocks, ``raw`` intact, with one
    ``tool_result`` block per call (``is_error`` set for a refusal);
``pause_turn``
    the assistant content goes back as it is, so the far end continues;
``end_turn``, ``stop_sequence``, none, or a word outside the vocabulary
    the model answered: the loop stops (``stopped="answered"``);
``refusal`` / ``max_tokens``
    the loop stops and says so (``stopped="refusal"`` / ``"max_tokens"``).

After ``max_turns`` model turns that still ask for tools it stops with
``stopped="max_turns"`` and runs nothing more. The budgets stop it the same
way, ``stopped`` naming the one reached: ``max_input_tokens`` and
``max_output_tokens`` (the run's summed ``usage``, checked between turns, so
the turn that crosses one is the last), ``max_tool_calls`` for the run and
``max_tool_calls_per_turn`` for one turn (the calls past either are never run:
each gets an error result, and the loop stops after that turn). An
:class:`~vaelii_llm.errors.LLMError` from the model (a timeout, an
unreachable host) propagates unchanged; a tool never raises (its refusal
travels back to the model as an error result).

Several tool sets share one loop (``toolsets=[kb_tools, files, search]``): their
tools are sent in the order given, each set's own (byte-stable) order kept, so
the prompt cache survives from turn to turn. Two sets offering one tool name are
refused before the first turn, naming both; :func:`vaelii_llm.tools.prefixed`
renames one set's tools to resolve it.

:func:`events` yields what a watcher wants while it runs (:class:`ToolCallStarted`,
:class:`ToolCallFinished`, :class:`TextArrived`, :class:`ToolInputArrived`,
:class:`ToolsIgnored`) and then the :class:`AgentResult`; :func:`run` drives
the same generator and returns the result.

A far end may drop the tools without a word (a chat template that renders
none: llama.cpp's server with a model's own template), and the model then
answers without the KB. When a turn that offered tools reports fewer input
tokens than the tools' own text could take (:data:`BYTES_PER_TOKEN_CEILING`),
the loop says so once, as a :class:`ToolsIgnored` event naming the fix. It
is a lower bound, so only a clear drop is reported; Ollama's own count is not
read (its host may count only the part of the prompt it did not cache, and
Ollama refuses tools a model cannot take with an error of its own).

The loop resends its tools and system prompt every turn, byte for byte, so it
marks them as a cached prefix (:data:`CACHE`): on the Messages API every turn
after the first reads them from the prompt cache (``usage``'s
``cache_read_input_tokens`` says how much); other backends send nothing for it.
``cache=False``, or ``VAELII_PROMPT_CACHE=0`` (see :func:`vaelii_llm.config.read`),
turns it off; a first :class:`~vaelii_llm._protocol.Request` carrying its own
``cache`` keeps it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from contextlib import aclosing
from typing import Any
from typing import ClassVar
from typing import Literal

import msgspec

from vaelii_llm import config
from vaelii_llm._protocol import Block
from vaelii_llm._protocol import Cache
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Provider
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StopReason
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ToolInputDelta
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm._protocol import Usage
from vaelii_llm.tools import Prefixed
from vaelii_llm.tools import ToolResult
from vaelii_llm.tools import ToolSource
from vaelii_llm.tools import unknown_tool

__all__ = [
    "AgentResult",
    "Event",
    "Stopped",
    "TextArrived",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolInputArrived",
    "ToolsIgnored",
    "events",
    "request",
    "run",
    "together",
]

DEFAULT_MAX_TURNS = 8
"""Model turns one question may take: enough for a few rounds of reads."""

SYSTEM = (
    "Answer the question from the knowledge base, reading it with the tools given. "
    "Sentences, goals and terms are EDN strings, such as (afraidOf MissMuffet ?who). "
    "Answer in plain prose, naming what the knowledge base says."
)
"""The system prompt :func:`request` sends unless given another."""

SUMMARY_CHARS = 100

CACHE = Cache(tools=True, system=True)
"""The cache breakpoints the loop adds to a first request naming none: after
the tools and after the system prompt, the prefix every turn resends."""

Stopped = Literal[
    "answered",
    "refusal",
    "max_tokens",
    "max_turns",
    "max_input_tokens",
    "max_output_tokens",
    "max_tool_calls",
    "max_tool_calls_per_turn",
    "declined",
]
"""Why the loop stopped: the model answered, refused, was cut by ``max_tokens``,
was still asking for tools when a limit was reached (the limit's name), or the
caller's ``approve`` answered ``"stop"`` (``declined``)."""

Approval = bool | Literal["stop"]
"""What ``approve`` answers for a call: run it, refuse it, or stop the run."""

ToolChoice = str
"""``"auto"``, ``"none"``, ``"required"`` or one tool's name (see :class:`Request`)."""

_GOES_ON: frozenset[StopReason | None] = frozenset({"tool_use", "pause_turn"})
_SPACE = re.compile(r"\s+")


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call the loop ran: what the model asked, what the toolset answered."""

    id: str
    name: str
    input: dict[str, Any]
    ok: bool
    result: str


class ToolCallStarted(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call is about to run (``turn`` counts model turns from 1);
    ``hints`` is what its source says of the tool (an MCP server's
    ``readOnlyHint``, ``destructiveHint``…; empty when it says nothing). The
    same value is what a caller's ``approve`` is shown before the call runs."""

    type: ClassVar[str] = "tool_call"
    turn: int
    id: str
    name: str
    input: dict[str, Any]
    hints: dict[str, Any] = msgspec.field(default_factory=dict)


class ToolCallFinished(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call ran; ``summary`` is one line for a human watching."""

    type: ClassVar[str] = "tool_result"
    turn: int
    call: ToolCall
    summary: str


class TextArrived(msgspec.Struct, frozen=True, kw_only=True):
    """Text the model is saying, as it arrives (a whole block at once from a
    backend that sent it without deltas)."""

    type: ClassVar[str] = "text"
    turn: int
    text: str


class ToolInputArrived(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of a tool call's arguments (JSON text) as the model writes
    them, before the call runs; joined, a call's pieces are its input's JSON.
    Only with deltas, from a backend that streams them."""

    type: ClassVar[str] = "tool_input"
    turn: int
    id: str
    name: str
    partial_json: str


class ToolsIgnored(msgspec.Struct, frozen=True, kw_only=True):
    """The far end read the turn's prompt without the tools it was offered
    (its input tokens could not hold them), so the answer does not come from
    them; ``message`` says so and names the fix. Yielded once per run.

    With ``what="tool_choice"`` it is the first turn's ``tool_choice`` the far
    end ignored (Ollama takes none): it asked for a call and the model made
    none (``tools_floor`` is then 0). Yielded once per run too."""

    type: ClassVar[str] = "tools_ignored"
    turn: int
    input_tokens: int
    tools_floor: int
    message: str
    what: Literal["tools", "tool_choice"] = "tools"


Event = ToolCallStarted | ToolCallFinished | TextArrived | ToolInputArrived | ToolsIgnored

BYTES_PER_TOKEN_CEILING = 8
"""More bytes of JSON than any tokenizer puts in one token (they average three
to four), so the tools' JSON length over it is fewer tokens than the tools take."""

TOOLS_FIX = (
    "use a model or chat template that renders tools (llama.cpp's server: --jinja "
    "with a tool-capable --chat-template-file; Ollama: a model with the tools capability)"
)
"""The next step a :class:`ToolsIgnored` names."""


def tools_ignored(request: Request, usage: Usage, turn: int) -> ToolsIgnored | None:
    """A :class:`ToolsIgnored` when ``usage`` shows the far end read fewer
    input tokens than ``request``'s tools take alone, else None (no tools, no
    count, or Ollama's count, which is not read: see the module docstring)."""
    if not request.tools or usage.input_tokens is None or usage.prompt_eval_count is not None:
        return None
    floor = len(msgspec.json.encode(request.tools)) // BYTES_PER_TOKEN_CEILING
    if usage.input_tokens >= floor:
        return None
    return ToolsIgnored(
        turn=turn,
        input_tokens=usage.input_tokens,
        tools_floor=floor,
        message=(
            f"the far end ignored the {len(request.tools)} tool(s) it was offered: it read "
            f"{usage.input_tokens} input tokens, where the tools alone take at least {floor}, "
            f"so the answer does not come from them; {TOOLS_FIX}"
        ),
    )


def _notices(
    first: Request, usage: Usage, turn: int, called: bool, said: set[str]
) -> list[ToolsIgnored]:
    """The :class:`ToolsIgnored` notices this turn brings that ``said`` (what
    the run has said already) does not hold yet."""
    found = [] if "tools" in said else [tools_ignored(first, usage, turn)]
    if turn == 1 and not called:
        found.append(choice_ignored(first, usage))
    new = [notice for notice in found if notice is not None]
    said.update(notice.what for notice in new)
    return new


def choice_ignored(request: Request, usage: Usage) -> ToolsIgnored | None:
    """A :class:`ToolsIgnored` for a first turn that forced a tool call
    (``tool_choice`` ``"required"`` or a name) and got none, else None."""
    if request.tool_choice in ("auto", "none"):
        return None
    return ToolsIgnored(
        turn=1,
        input_tokens=usage.input_tokens or 0,
        tools_floor=0,
        what="tool_choice",
        message=(
            f"the far end ignored tool_choice={request.tool_choice!r}: the model called no "
            "tool (Ollama takes no tool_choice); ask in words, or use a backend that takes it"
        ),
    )


class AgentResult(msgspec.Struct, frozen=True, kw_only=True):
    """How the loop ended.

    ``answer`` is the text of the last turn; ``stop_reason`` that turn's;
    ``stopped`` why the loop stopped; ``usage`` the token counts (and host
    durations) summed over every turn; ``messages`` the whole conversation, to
    continue it; ``response`` the last turn as received.
    """

    answer: str
    tool_calls: list[ToolCall]
    stop_reason: StopReason | None
    stopped: Stopped
    turns: int
    usage: Usage
    messages: list[Message]
    response: Response

    def summary(self) -> dict[str, Any]:
        """The JSON-ready view a command or a web route answers with: answer,
        tool calls with results, stop reason, why it stopped, turns, usage."""
        return {
            "answer": self.answer,
            "tool_calls": msgspec.to_builtins(self.tool_calls),
            "stop_reason": self.stop_reason,
            "stopped": self.stopped,
            "turns": self.turns,
            "usage": msgspec.to_builtins(self.usage),
        }


class _Together:
    """Several tool sources as one: each tool name routed to the set offering it."""

    name = "toolsets"

    def __init__(self, sources: Sequence[ToolSource]) -> None:
        self.route: dict[str, ToolSource] = {}
        self.listed: list[ToolSchema] = []
        for source in sources:
            for schema in source.schemas():
                held = self.route.get(schema.name)
                if held is not None:
                    raise ValueError(
                        f"the tool {schema.name!r} is offered by both {held.name!r} and "
                        f"{source.name!r}; give one of them a prefix "
                        "(vaelii_llm.tools.prefixed(toolset, 'x_'))"
                    )
                self.route[schema.name] = source
                self.listed.append(schema)

    def schemas(self) -> list[ToolSchema]:
        return list(self.listed)

    async def call(self, name: str, input: Any = None) -> ToolResult:
        held = self.route.get(name) if isinstance(name, str) else None
        if held is None:
            return unknown_tool(name, self.route)
        return await held.call(name, input)


def together(
    toolset: ToolSource | Sequence[ToolSource] | None = None,
    toolsets: Sequence[ToolSource] | None = None,
) -> ToolSource:
    """The one source the loop calls: ``toolset`` itself, or every set of
    ``toolsets`` (names checked, a clash refused with ``ValueError`` naming both)."""
    given: list[ToolSource] = []
    if toolset is not None:
        if isinstance(toolset, ToolSource):
            given.append(toolset)
        elif isinstance(toolset, Sequence) and not isinstance(toolset, str | Request):
            given.extend(toolset)
        else:
            raise TypeError(f"a toolset is a vaelii_llm.tools.ToolSource, not {toolset!r}")
    given.extend(toolsets or ())
    if not given:
        raise TypeError("the loop needs a toolset (or toolsets=[...])")
    for source in given:
        if not isinstance(source, ToolSource):
            raise TypeError(f"a toolset is a vaelii_llm.tools.ToolSource, not {source!r}")
    return given[0] if len(given) == 1 else _Together(given)


def request(question: str, toolset: ToolSource | Sequence[ToolSource], **fields: Any) -> Request:
    """The first turn for ``question``: :data:`SYSTEM` and every tool of
    ``toolset`` (one set or several), unless ``fields`` (any :class:`Request`
    field) say otherwise."""
    fields.setdefault("system", SYSTEM)
    if "tools" not in fields:
        fields["tools"] = together(toolset).schemas()
    return Request(messages=[Message(role="user", content=question)], **fields)


def summarize(call: ToolCall) -> str:
    """One line for a human: ``ok`` or ``refused``, then the result's opening."""
    flat = _SPACE.sub(" ", call.result).strip()
    if len(flat) > SUMMARY_CHARS:
        flat = flat[: SUMMARY_CHARS - 1] + "…"
    return f"{'ok' if call.ok else 'refused'}: {flat}" if flat else ("ok" if call.ok else "refused")


def _text(content: Sequence[Block]) -> str:
    return "".join(block.text for block in content if isinstance(block, TextBlock))


_COUNTED = tuple(f.name for f in msgspec.structs.fields(Usage) if f.name != "extra")


def _add(total: Usage, turn: Usage) -> Usage:
    """Every count and duration summed; a field neither turn reported stays None."""
    summed: dict[str, Any] = {}
    for name in _COUNTED:
        a, b = getattr(total, name), getattr(turn, name)
        if a is not None or b is not None:
            summed[name] = (a or 0) + (b or 0)
    return Usage(**summed)


async def _turn(
    model: Provider, turn_request: Request, turn: int, deltas: bool
) -> AsyncGenerator[TextArrived | ToolInputArrived | Response, None]:
    """One model turn through ``stream``: its text and tool-call arguments as
    they arrive, then the Response."""
    spoken: set[int] = set()
    calls: dict[int, ToolUseStart] = {}  # the calls begun, by block index
    # the flag only when asked for, so a backend written before deltas still streams
    stream = model.stream(turn_request, deltas=True) if deltas else model.stream(turn_request)
    async with aclosing(stream) as items:
        async for item in items:
            if isinstance(item, TextDelta) and item.text:
                spoken.add(item.index)
                yield TextArrived(turn=turn, text=item.text)
            elif isinstance(item, ToolUseStart):
                calls[item.index] = item
            elif isinstance(item, ToolInputDelta):
                start = calls.get(item.index)
                if start is not None:
                    yield ToolInputArrived(
                        turn=turn, id=start.id, name=start.name, partial_json=item.partial_json
                    )
            elif isinstance(item, Response):
                for index, block in enumerate(item.content):
                    if isinstance(block, TextBlock) and block.text and index not in spoken:
                        yield TextArrived(turn=turn, text=block.text)
                yield item


def _owner(source: ToolSource, name: str) -> tuple[ToolSource, str]:
    """The set that answers the tool ``name`` and the name it knows it by,
    through :func:`together` and :func:`~vaelii_llm.tools.prefixed`."""
    while True:
        if isinstance(source, _Together) and name in source.route:
            source = source.route[name]
        elif isinstance(source, Prefixed) and name.startswith(source.prefix):
            name = name[len(source.prefix) :]
            source = source.inner
        else:
            return source, name


def _hints(source: ToolSource, name: str) -> dict[str, Any]:
    """What ``source`` says of the tool ``name`` (none when it says nothing)."""
    said = getattr(source, "hints", None)
    found = said(name) if callable(said) else None
    return dict(found) if isinstance(found, dict) else {}


def _not_run(use: ToolUseBlock, why: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=use.id, content=f"not run: {why}", is_error=True)


async def _one_call(
    source: ToolSource,
    use: ToolUseBlock,
    alone: asyncio.Lock | None,
    deadline: float,
    budget_ms: int,
) -> ToolResult:
    """One call under the turn's ``deadline``, after the calls before it to
    the same serial set (``alone``) have finished."""
    try:
        async with asyncio.timeout_at(deadline):
            if alone is None:
                return await source.call(use.name, use.input)
            async with alone:
                return await source.call(use.name, use.input)
    except TimeoutError:
        return ToolResult(
            ok=False,
            error=f"timeout: {use.name} did not finish within the turn's {budget_ms} ms",
        )


async def _settle(tasks: Sequence[asyncio.Task[ToolResult]]) -> None:
    """Cancel the calls still running and wait until every one has ended."""
    running = [task for task in tasks if not task.done()]
    for task in running:
        task.cancel()
    if running:
        await asyncio.wait(running)
    for task in tasks:  # a failure after one before it already propagated: retrieved here
        if not task.cancelled():
            task.exception()


async def _run_tools(
    toolset: ToolSource,
    uses: Sequence[ToolUseBlock],
    turn: int,
    calls: list[ToolCall],
    bound: tuple[int, Stopped],
    approve: Callable[[ToolCallStarted], Awaitable[Approval]] | None,
    budget_ms: int,
    results: list[Block],
) -> AsyncGenerator[Event | Stopped, None]:
    """Run the first ``allowed`` of ``uses`` at once (the rest get an error
    result naming ``limit``), each under ``budget_ms`` from the turn's first
    call; events in the order of the calls, and their results appended to
    ``results`` in that order. ``"declined"`` is yielded when ``approve``
    stopped the run (no call ran)."""
    allowed, limit = bound
    answers: list[ToolResultBlock | None] = [None] * len(uses)
    started: dict[int, ToolCallStarted] = {}
    owners: dict[int, ToolSource] = {}
    for index, use in enumerate(uses):
        if index >= allowed:
            answers[index] = _not_run(use, f"over the {limit} limit")
        elif use.partial:  # cut inside its input: never run
            answers[index] = _not_run(use, "the call was cut short")
        else:
            owner, own_name = _owner(toolset, use.name)
            owners[index] = owner
            started[index] = ToolCallStarted(
                turn=turn, id=use.id, name=use.name, input=use.input, hints=_hints(owner, own_name)
            )
    if approve is not None:  # every call is shown before any runs, in their order
        for index, event in list(started.items()):
            if getattr(owners[index], "read_only", False) is True:
                continue  # a read needs no approval
            said = await approve(event)
            if said == "stop":
                for rest in started:
                    answers[rest] = _not_run(uses[rest], "the caller stopped the run")
                results.extend(answer for answer in answers if answer is not None)
                yield "declined"
                return
            if said is not True:
                answers[index] = _not_run(uses[index], "the caller refused it")
                del started[index]
    deadline = asyncio.get_running_loop().time() + budget_ms / 1000
    alone: dict[int, asyncio.Lock] = {}  # one lock per set whose calls run one at a time
    tasks: dict[int, asyncio.Task[ToolResult]] = {}
    try:
        for index, event in started.items():
            owner = owners[index]
            lock = alone.setdefault(id(owner), asyncio.Lock()) if _serial(owner) else None
            tasks[index] = asyncio.ensure_future(
                _one_call(toolset, uses[index], lock, deadline, budget_ms)
            )
            yield event
        for index, task in tasks.items():
            use = uses[index]
            result = await task
            call = ToolCall(
                id=use.id, name=use.name, input=use.input, ok=result.ok, result=result.text
            )
            calls.append(call)
            yield ToolCallFinished(turn=turn, call=call, summary=summarize(call))
            answers[index] = result.block(use.id)
    finally:
        await _settle(list(tasks.values()))
    results.extend(answer for answer in answers if answer is not None)


def _serial(source: ToolSource) -> bool:
    return getattr(source, "serial", False) is True


def _arguments(
    toolset: ToolSource | Sequence[ToolSource] | str | Request | None,
    question: str | Request | None,
    toolsets: Sequence[ToolSource] | None,
) -> tuple[ToolSource, str | Request]:
    """``(model, toolset, question)`` or ``(model, question, toolsets=[...])``."""
    if question is None and isinstance(toolset, str | Request) and toolsets is not None:
        toolset, question = None, toolset
    if question is None:
        raise TypeError("the loop needs a question (a str or a first Request)")
    if isinstance(toolset, str | Request):
        raise TypeError("give the toolset before the question, or toolsets=[...]")
    return together(toolset, toolsets), question


async def events(
    model: Provider,
    toolset: ToolSource | Sequence[ToolSource] | str | Request | None = None,
    question: str | Request | None = None,
    *,
    toolsets: Sequence[ToolSource] | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    deltas: bool = True,
    cache: bool | None = None,
    max_input_tokens: int | None = None,
    max_output_tokens: int | None = None,
    max_tool_calls: int | None = None,
    max_tool_calls_per_turn: int | None = None,
    tool_choice: ToolChoice | None = None,
    approve: Callable[[ToolCallStarted], Awaitable[Approval]] | None = None,
) -> AsyncGenerator[Event | AgentResult, None]:
    """Run the loop, yielding each event as it happens and the
    :class:`AgentResult` last. ``question`` is the user's text (asked with
    :func:`request`) or a whole first :class:`Request`. The tools are
    ``toolset``'s, or every set of ``toolsets`` (then the question may come
    second: ``events(model, "…", toolsets=[a, b])``); a name two sets offer is
    refused with ``ValueError`` before the first turn. ``deltas=False`` asks
    the backend for whole blocks only (text then arrives a block at a time).
    ``cache`` adds :data:`CACHE` to a first request naming no ``cache`` (None:
    ``VAELII_PROMPT_CACHE`` decides, on unless switched off). The ``max_*``
    budgets (None: no limit) stop the loop as the module says.
    ``tool_choice`` (None: the first request's) goes on the first turn only
    (``"required"`` or a tool's name forces a call then; later turns are
    ``"auto"``, so the model can answer). ``approve`` is awaited with each call
    (its :class:`ToolCallStarted`) before any call of the turn runs, a KB read's
    aside: ``True`` runs it, ``False`` refuses it (the model reads an error
    result), ``"stop"`` runs none and ends the loop (``stopped="declined"``).
    Iterate under ``contextlib.aclosing``: stopping early closes the turn's
    HTTP response at once, and cancels the tool calls running."""
    _check(
        max_turns=max_turns,
        max_input_tokens=max_input_tokens,
        max_output_tokens=max_output_tokens,
        max_tool_calls=max_tool_calls,
        max_tool_calls_per_turn=max_tool_calls_per_turn,
    )
    toolset, question = _arguments(toolset, question, toolsets)
    first = request(question, toolset) if isinstance(question, str) else question
    if first.cache is None and config.prompt_cache(cache):
        first = msgspec.structs.replace(first, cache=CACHE)
    if tool_choice is not None:
        first = msgspec.structs.replace(first, tool_choice=tool_choice)
    later = msgspec.structs.replace(first, tool_choice="auto")
    messages = list(first.messages)
    calls: list[ToolCall] = []
    usage = Usage()
    turn = 0
    said_once: set[str] = set()  # the notices yielded, each at most once
    while True:
        turn += 1
        response: Response | None = None
        asked = first if turn == 1 else later
        async with aclosing(
            _turn(model, msgspec.structs.replace(asked, messages=list(messages)), turn, deltas)
        ) as said:
            async for item in said:
                if isinstance(item, Response):
                    response = item
                else:
                    yield item
        if response is None:  # a Provider whose stream ended without its Response
            raise RuntimeError("the provider's stream ended without a Response")
        uses = [block for block in response.content if isinstance(block, ToolUseBlock)]
        for notice in _notices(first, response.usage, turn, bool(uses), said_once):
            yield notice
        usage = _add(usage, response.usage)
        messages.append(Message(role="assistant", content=list(response.content)))
        stopped = _stopped(response.stop_reason, turn, max_turns)
        if response.stop_reason == "tool_use" and not uses:
            stopped = "answered"  # asked for tools and named none: nothing to send back
        if stopped is None:
            stopped = _spent(usage, max_input_tokens, max_output_tokens)
        if stopped is not None:
            yield _result(response, stopped, calls, turn, usage, messages)
            return
        if response.stop_reason == "tool_use":
            results: list[Block] = []
            allowed, limit = _allowed(
                len(uses), len(calls), max_tool_calls, max_tool_calls_per_turn
            )
            ended: list[Stopped] = [limit] if allowed < len(uses) else []
            async with aclosing(
                _run_tools(
                    toolset, uses, turn, calls, (allowed, limit), approve, first.timeout_ms, results
                )
            ) as ran:
                async for step in ran:
                    if isinstance(step, str):
                        ended.insert(0, step)
                    else:
                        yield step
            messages.append(Message(role="user", content=results))
            if ended:
                yield _result(response, ended[0], calls, turn, usage, messages)
                return
        # pause_turn: the assistant content alone goes back, and the far end goes on


def _check(**budgets: int | None) -> None:
    """Refuse a limit that is not a whole number of at least 1 (None: no limit)."""
    for name, value in budgets.items():
        if value is None and name != "max_turns":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} is a whole number of at least 1, got {value!r}")


def _result(
    response: Response,
    stopped: Stopped,
    calls: list[ToolCall],
    turn: int,
    usage: Usage,
    messages: list[Message],
) -> AgentResult:
    return AgentResult(
        answer=_text(response.content),
        tool_calls=calls,
        stop_reason=response.stop_reason,
        stopped=stopped,
        turns=turn,
        usage=usage,
        messages=messages,
        response=response,
    )


def _spent(usage: Usage, max_input: int | None, max_output: int | None) -> Stopped | None:
    """The token budget the run's summed usage has reached, if any."""
    if max_input is not None and (usage.input_tokens or 0) >= max_input:
        return "max_input_tokens"
    if max_output is not None and (usage.output_tokens or 0) >= max_output:
        return "max_output_tokens"
    return None


def _allowed(
    asked: int, ran: int, per_run: int | None, per_turn: int | None
) -> tuple[int, Stopped]:
    """How many of this turn's ``asked`` calls may run, and the limit that bounds them."""
    allowed = asked
    limit: Stopped = "max_tool_calls_per_turn"
    if per_turn is not None and per_turn < allowed:
        allowed = per_turn
    if per_run is not None and per_run - ran < allowed:
        allowed, limit = max(per_run - ran, 0), "max_tool_calls"
    return allowed, limit


def _stopped(reason: StopReason | None, turn: int, max_turns: int) -> Stopped | None:
    """None while the loop goes on (``tool_use``, ``pause_turn``) and turns remain."""
    if reason in _GOES_ON:
        return "max_turns" if turn >= max_turns else None
    if reason == "refusal":
        return "refusal"
    if reason == "max_tokens":
        return "max_tokens"
    return "answered"


async def run(
    model: Provider,
    toolset: ToolSource | Sequence[ToolSource] | str | Request | None = None,
    question: str | Request | None = None,
    *,
    toolsets: Sequence[ToolSource] | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    deltas: bool = False,
    cache: bool | None = None,
    on_event: Callable[[Event], None] | None = None,
    max_input_tokens: int | None = None,
    max_output_tokens: int | None = None,
    max_tool_calls: int | None = None,
    max_tool_calls_per_turn: int | None = None,
    tool_choice: ToolChoice | None = None,
    approve: Callable[[ToolCallStarted], Awaitable[Approval]] | None = None,
) -> AgentResult:
    """Run the loop of :func:`events` to its end and return the result;
    ``on_event`` sees each event as it happens."""
    loop = events(
        model,
        toolset,
        question,
        toolsets=toolsets,
        max_turns=max_turns,
        deltas=deltas,
        cache=cache,
        max_input_tokens=max_input_tokens,
        max_output_tokens=max_output_tokens,
        max_tool_calls=max_tool_calls,
        max_tool_calls_per_turn=max_tool_calls_per_turn,
        tool_choice=tool_choice,
        approve=approve,
    )
    async with aclosing(loop) as it:
        async for item in it:
            if isinstance(item, AgentResult):
                return item
            if on_event is not None:
                on_event(item)
    raise AssertionError("events() always ends with its result")  # pragma: no cover
