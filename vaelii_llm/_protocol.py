"""The vendor-neutral request, response and :class:`Provider` protocol.

A caller's loop is written once against these types and runs on every backend.
Every key any code path sends is a field below; a backend maps them to its wire.

Request fields
    ``messages`` the conversation (:class:`Message`, a string or a list of blocks);
    ``system`` the system prompt (a string, or text blocks); ``model`` (None:
    the backend's configured model);
    ``tools`` (:class:`ToolSchema`, as :func:`vaelii_llm.tools.schemas` builds them);
    ``max_tokens``; ``timeout_ms`` the whole turn's budget, headers and body;
    ``stall_ms`` (None: unbounded) the longest the far end may go without
    sending content, from the request being sent and then between content
    chunks, inside that budget: keep-alives (pings, comments, empty chunks)
    are not content, so a stream stalled after its first words ends in
    :class:`~vaelii_llm.errors.LLMTimeout` with ``phase == "stall"`` long
    before ``timeout_ms``; a whole turn takes it as the bound on its head
    arriving and between reads of its body;
    ``stop_sequences``; ``format`` a JSON schema the answer must match (Messages
    API ``output_config.format``, Ollama ``format``); ``effort`` (Messages API
    ``output_config.effort``, Chat Completions ``reasoning_effort``, Responses
    ``reasoning.effort``; Ollama takes ``think`` instead); ``think`` (Ollama's ``think``: see
    :class:`Request`); ``cache`` where the far end may cache the prompt's
    prefix (:class:`Cache`); ``thinking_display`` (``"summarized"`` opts into
    readable reasoning, ``"omitted"`` is the API's default); ``temperature``
    (each wire's rule: see :class:`Request`); ``num_ctx`` and ``keep_alive`` (Ollama only);
    ``fallbacks`` (Messages API: left :data:`UNSET`, the backend sends its
    default; ``None`` sends none, and no beta header); ``tool_choice``
    (:data:`TOOL_CHOICES` or the name of one of ``tools``: see :class:`Request`).

Response fields
    ``content`` the blocks, in order; ``stop_reason`` one :data:`StopReason` on
    every backend (``end_turn``, ``tool_use``, ``max_tokens``,
    ``stop_sequence``, ``refusal``, ``pause_turn``; ``None`` only where the far
    end gave none): branch on it first, since a refusal comes with empty or
    partial content; ``vendor_stop_reason`` the far end's own word for it
    (Ollama's ``stop``, ``length``…), never lost; ``stop_sequence``;
    ``stop_details`` (the refusal's details, when given); ``model`` (the model
    that served, after a server-side fallback too); ``id``; ``usage``
    (:class:`Usage`: ``input_tokens``/``output_tokens`` on every backend that
    counts, the host's own counts and durations beside them); ``extra`` the
    top-level fields of the far end's message this package does not model
    (``container``, ``context_management``…), kept for a caller continuing the
    conversation; ``request_id`` and ``headers`` the far end's request id and
    its rate-limit and retry headers, for a caller's own limiter or retry;
    ``first_chunk_ms`` and ``longest_gap_ms`` (a streamed HTTP turn only) the
    time from sending to the first content and the longest wait between two
    content chunks, to choose a ``stall_ms`` from.

Blocks
    :class:`TextBlock`, :class:`ThinkingBlock` (with its ``signature``),
    :class:`RedactedThinkingBlock`, :class:`ToolUseBlock`,
    :class:`ToolResultBlock`, and :class:`OpaqueBlock` for a vendor type this
    package does not model. Every block received from a far end keeps its
    original JSON in ``raw``; an encoder sends ``raw`` back unchanged when it is
    set, since the Messages API rejects an edited thinking block. A
    :class:`ToolUseBlock` with ``partial=True`` was cut by ``max_tokens`` inside
    its input: its ``input`` is a lenient reading of what arrived, and it must
    never be run (a loop that branches on ``stop_reason`` first never does).

    :class:`ImageBlock` and :class:`DocumentBlock` (:mod:`vaelii_llm._media`)
    go in a user message and in a tool result's content list; a
    backend refuses one it cannot send, or one over its far end's documented
    limits, with :class:`~vaelii_llm.errors.LLMEncode`, before sending.

Deltas
    ``stream(request, deltas=True)`` also yields :class:`TextDelta`,
    :class:`ThinkingDelta`, :class:`ToolUseStart` and :class:`ToolInputDelta`
    items as the far end sends them, before the whole block they belong to
    (``index`` is the block's position in ``content``). Without the flag a
    stream yields whole blocks and the final :class:`Response` only.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from collections.abc import Sequence
from itertools import repeat
from types import TracebackType
from typing import Any
from typing import ClassVar
from typing import Final
from typing import Literal
from typing import NamedTuple
from typing import Never
from typing import Protocol
from typing import Self
from typing import runtime_checkable

from msgspec import UNSET
from msgspec import Struct
from msgspec import UnsetType
from msgspec import field
from msgspec.structs import astuple

from vaelii_llm._closing import ClosesOnExit
from vaelii_llm._media import DocumentBlock
from vaelii_llm._media import ImageBlock
from vaelii_llm.errors import LLMEncode
from vaelii_llm.errors import LLMUnsupported
from vaelii_llm.errors import excerpt

__all__ = [
    "UNSET",
    "Block",
    "Cache",
    "Delta",
    "DocumentBlock",
    "ImageBlock",
    "Message",
    "OpaqueBlock",
    "Provider",
    "ProviderBase",
    "RedactedThinkingBlock",
    "Request",
    "Response",
    "StopReason",
    "StreamItem",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "ThinkingDelta",
    "ToolInputDelta",
    "ToolResultBlock",
    "ToolSchema",
    "ToolUseBlock",
    "ToolUseStart",
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
    partial: bool = False
    raw: Raw = None


class ToolResultBlock(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """What a tool answered, sent back in a user message: text, or a list of
    text, image and document blocks (a screenshot, a chart, a fetched PDF)."""

    type: ClassVar[str] = "tool_result"
    tool_use_id: str
    content: str | Sequence[TextBlock | ImageBlock | DocumentBlock]
    is_error: bool = False
    raw: Raw = None


class OpaqueBlock(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """A vendor block type this package does not model; it round-trips
    through ``raw`` and no encoder builds one from scratch."""

    type: str
    raw: dict[str, Any]


Block = (
    TextBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ToolUseBlock
    | ToolResultBlock
    | OpaqueBlock
    | ImageBlock
    | DocumentBlock
)


def unhandled_block(block: Never, label: str) -> LLMEncode:
    """What the last case of an encoder's ``match`` over :data:`Block` (or a
    part of it) raises: typed ``Never``, so mypy names each ``match`` a new
    block type is not handled in, as :func:`typing.assert_never` would; an
    object of no block type that reaches it at run time is refused as
    :class:`~vaelii_llm.errors.LLMEncode` before any byte is sent."""
    return LLMEncode(str(getattr(block, "type", type(block).__name__)), label)


class Message(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """One turn of the conversation. A string content is one text block."""

    role: Literal["user", "assistant"]
    content: str | list[Block]


TOOL_NAME_MAX: Final = 64
"""The longest tool name the providers' identifier grammar allows."""
TOOL_NAME_GRAMMAR: Final = re.compile(rf"^[a-zA-Z0-9_-]{{1,{TOOL_NAME_MAX}}}$")
"""The providers' tool-name grammar: what every wire accepts as a tool's name."""


class ToolSchema(Struct, frozen=True, kw_only=True, omit_defaults=True, repr_omit_defaults=True):
    """A tool as the model sees it. ``strict`` asks the far end to require
    every declared property, so it is set only where every one is required."""

    name: str
    description: str
    input_schema: dict[str, Any]
    strict: bool | None = None


class Usage(Struct, frozen=True, kw_only=True, omit_defaults=True, repr_omit_defaults=True):
    """What the host measured. Fields a backend does not report stay None.

    One meaning on every backend (OpenTelemetry's GenAI one): ``input_tokens``
    is every token of the prompt, the cached ones included;
    ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` are the
    parts of it read from and written to the far end's cache, never to be
    added to it again. ``output_tokens`` is every token generated, thinking
    included. The wires differ and are mapped here: the Chat Completions
    ``prompt_tokens`` already counts the cached part; the Messages API's
    ``input_tokens`` counts only what follows the last cache breakpoint, so
    its cache counts are added back; Ollama reports no cached part, and its
    ``prompt_eval_count`` and ``eval_count`` stay beside the two counts with
    the durations, in ns. The same prompt on the same server reads the same
    on every wire. ``extra`` keeps the usage fields the far end sent that are
    not modelled here.
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
    extra: dict[str, Any] | None = None


MAX_TOKEN_COUNT: Final = 10**9
"""The largest token count a far end may report for one turn: far past any
context window, and small enough that a run's sum cannot overflow a 64-bit
counter in a span or a metric."""
MAX_DURATION_NS: Final = 2**63 - 1
"""The largest duration (ns) a far end may report: a signed 64-bit integer,
what Ollama's own counters hold."""
_TOKEN_FIELDS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "prompt_eval_count",
    "eval_count",
)
_DURATION_FIELDS: Final = (
    "total_duration",
    "load_duration",
    "prompt_eval_duration",
    "eval_duration",
)


def usage_fault(usage: Usage | None) -> str | None:
    """What is wrong with counts a far end reported (None when nothing is):
    a count below zero or past :data:`MAX_TOKEN_COUNT`, a duration below zero
    or past :data:`MAX_DURATION_NS`. A budget summing counts is only as good
    as the counts, so a backend refuses such a turn rather than pass it on."""
    if usage is None:
        return None
    values = astuple(usage)
    for at, name, most in _BOUNDED:
        value = values[at]
        if value is not None and not 0 <= value <= most:
            return f"reported a usage whose {name} is {_shown(value)}, outside 0 to {most}"
    return None


def _shown(value: object) -> str:
    """A refused value for a message: a number too long to print whole is
    named by its length, anything else is cut to an excerpt."""
    if isinstance(value, int) and not -(10**24) < value < 10**24:
        return "a number of 25 digits or more"
    return excerpt(repr(value), 60)


_BOUNDED: Final = tuple(
    (Usage.__struct_fields__.index(name), name, most)
    for fields, most in ((_TOKEN_FIELDS, MAX_TOKEN_COUNT), (_DURATION_FIELDS, MAX_DURATION_NS))
    for name in fields
)
"""Each bounded count's place among :class:`Usage`'s fields, its name and its
bound: :func:`usage_fault` reads every turn's counts in one ``astuple``."""


CacheTTL = Literal["5m", "1h"]
"""How long the far end keeps a cached prefix: the Messages API's two lifetimes."""

MAX_CACHE_BREAKPOINTS: Final = 4
"""The most cache breakpoints one Messages API request may carry (the
automatic one included)."""


class Cache(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """Where the far end may cache the prompt's prefix, and for how long.

    The prompt is read in order: the tools, then the system prompt, then the
    messages. A breakpoint says "everything up to here is stable": a later
    turn sending the same bytes up to it reads that prefix from the cache.
    ``auto`` is the Messages API's automatic caching (one breakpoint the far
    end moves to the last block as the conversation grows); ``tools``,
    ``system`` and ``blocks`` are explicit breakpoints: after the last tool,
    after the system prompt, after a message block named by ``(message,
    block)`` positions (negative counts from the end, as in Python; a string
    content is one block). ``ttl`` is each breakpoint's lifetime.

    The Messages API takes at most :data:`MAX_CACHE_BREAKPOINTS`, ``auto``
    counted: a fifth, a position naming no block, or a breakpoint on a
    thinking block or an empty text block is refused with
    :class:`~vaelii_llm.errors.LLMEncode` before anything is sent. A
    breakpoint on a part that is absent (no tools, no system prompt) is
    none. Ollama and the OpenAI-compatible servers cache prefixes on their
    own: they send nothing for it and report what they read from their cache
    in ``Usage.cache_read_input_tokens`` where they say.
    """

    ttl: CacheTTL = "5m"
    auto: bool = False
    tools: bool = False
    system: bool = False
    blocks: tuple[tuple[int, int], ...] = ()


class Request(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """One turn to run. Field meanings are in the module docstring.

    ``think`` is Ollama's ``think``: ``True``/``False`` switch a thinking
    model's reasoning on or off, ``"low"``/``"medium"``/``"high"`` set its
    level where the model takes levels (gpt-oss); None sends nothing (the
    model's default). It is its own field, not ``effort``: ``effort`` is the
    Messages API's spend across the whole turn (text and tool calls too, with
    thinking always adaptive there), it has no "off", and a model that cannot
    think refuses any ``think`` sent to it, so a caller's ``effort`` chosen
    for the Messages API must not switch reasoning on at an Ollama host. The
    Messages API and the OpenAI-compatible wire do not send it.

    ``temperature`` by wire: Ollama sends the request's, else 0, so an answer
    is reproducible; Chat Completions and Responses send it only when the
    request names one, since OpenAI's GPT-5 and o-series models refuse any
    but their default (left unset, the server's own default applies); the
    Messages API never sends it, since its current models refuse it.

    ``tool_choice``: ``"auto"`` (the model decides; sent as nothing),
    ``"none"`` (no call), ``"required"`` (some call) or a tool's name (that
    call). Chat Completions and Responses send it as they document it; Ollama
    takes none (``"none"`` sends no tools, the rest nothing); the Messages API
    sends no tools for ``"none"`` and refuses ``"required"`` or a name with
    :class:`~vaelii_llm.errors.LLMEncode` before sending, since its models
    refuse a forced tool. A name must be one of ``tools``.
    """

    messages: list[Message]
    system: str | list[TextBlock] | None = None
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
    think: bool | Literal["low", "medium", "high"] | None = None
    cache: Cache | None = None
    stall_ms: int | None = None
    tool_choice: str = "auto"

    def __post_init__(self) -> None:
        """Refuse a field of the wrong type (``TypeError``) or out of its range
        (``ValueError``) by :data:`_RULES`, before any turn can send it: a
        NaN or a 400-digit budget never reaches a deadline. Every turn makes
        a request, so the types are read at once and compared with the sets
        of types already found to fit; only the bounded fields are read one
        by one."""
        values = astuple(self)
        kinds = tuple(map(type, values))
        if kinds not in _FITTING:
            _check_types(values)
            if len(_FITTING) < _FITTING_MOST:
                _FITTING.add(kinds)
        for at, least, most in _BOUNDED_FIELDS:
            value = values[at]
            if value is not None and not least <= value <= most:
                _refuse(at, value)
        for at, item in _LIST_FIELDS:
            value = values[at]
            if type(value) is list and value and not all(map(isinstance, value, repeat(item))):
                _refuse_item(at, value)
        for at, words in _WORD_FIELDS:
            value = values[at]
            if type(value) is str and value not in words:
                _refuse(at, value)
        choice = self.tool_choice
        if choice not in TOOL_CHOICES and not any(t.name == choice for t in self.tools):
            _refuse(_CHOICE_AT, choice)


MAX_WAIT_MS: Final = 7 * 24 * 3600 * 1000
"""The longest ``timeout_ms`` or ``stall_ms`` a request may carry (a week):
past any turn's need, and far inside what a loop's clock can hold."""

THINK_LEVELS: Final = ("low", "medium", "high")
"""The levels ``think`` takes besides on and off (for a model that takes levels)."""

TOOL_CHOICES: Final = frozenset({"auto", "none", "required"})
"""The ``tool_choice`` words; any other value names one of the request's tools."""


class _Rule(NamedTuple):
    """What one :class:`Request` field takes: ``types`` (``bool`` only where
    named), a list's ``item`` type, a number's ``least`` and ``most``, a
    string's ``words``, and all of it in words (``takes``) for the refusal."""

    takes: str
    types: tuple[type, ...]
    item: type | None = None
    least: float | None = None
    most: float = 0
    words: tuple[str, ...] = ()


_NONE: Final = type(None)
_RULES: Final = tuple(
    {
        "messages": _Rule("a list of Message", (list,), Message),
        "system": _Rule("a str, a list of TextBlock or None", (str, list, _NONE), TextBlock),
        "model": _Rule("a str or None", (str, _NONE)),
        "tools": _Rule("a list of ToolSchema", (list,), ToolSchema),
        "max_tokens": _Rule(
            f"a whole number, 1 to {MAX_TOKEN_COUNT}", (int,), None, 1, MAX_TOKEN_COUNT
        ),
        "timeout_ms": _Rule(
            f"a whole number of ms, 1 to {MAX_WAIT_MS}", (int,), None, 1, MAX_WAIT_MS
        ),
        "stop_sequences": _Rule("a list of str", (list,), str),
        "format": _Rule("a dict (a JSON schema) or None", (dict, _NONE)),
        "effort": _Rule("a str or None", (str, _NONE)),
        "thinking_display": _Rule("a str or None", (str, _NONE)),
        "temperature": _Rule("a number from 0 to 2, or None", (float, int, _NONE), None, 0, 2),
        "num_ctx": _Rule(
            f"a whole number, 1 to {MAX_TOKEN_COUNT}, or None",
            (int, _NONE),
            None,
            1,
            MAX_TOKEN_COUNT,
        ),
        "keep_alive": _Rule("a str or None", (str, _NONE)),
        "fallbacks": _Rule(
            "a str, a list of str, None or UNSET", (str, list, _NONE, UnsetType), str
        ),
        "think": _Rule(
            "True, False, 'low', 'medium', 'high' or None", (bool, str, _NONE), words=THINK_LEVELS
        ),
        "cache": _Rule("a Cache or None", (Cache, _NONE)),
        "stall_ms": _Rule(
            f"a whole number of ms, 1 to {MAX_WAIT_MS}, or None", (int, _NONE), None, 1, MAX_WAIT_MS
        ),
        "tool_choice": _Rule("'auto', 'none', 'required' or the name of one of its tools", (str,)),
    }.items()
)
"""One rule per :class:`Request` field, in the fields' order."""
if tuple(name for name, _ in _RULES) != Request.__struct_fields__:  # pragma: no cover
    raise RuntimeError("Request's rules name its fields in their order")
_BOUNDED_FIELDS: Final = tuple(
    (at, rule.least, rule.most) for at, (_, rule) in enumerate(_RULES) if rule.least is not None
)
_LIST_FIELDS: Final = tuple(
    (at, rule.item) for at, (_, rule) in enumerate(_RULES) if rule.item is not None
)
_CHOICE_AT: Final = Request.__struct_fields__.index("tool_choice")
_WORD_FIELDS: Final = tuple((at, rule.words) for at, (_, rule) in enumerate(_RULES) if rule.words)
_FITTING: Final[set[tuple[type, ...]]] = set()
"""The tuples of field types already found to fit :data:`_RULES` (a value of
a new type is checked once; at most :data:`_FITTING_MOST` are kept)."""
_FITTING_MOST: Final = 256


def _check_types(values: tuple[Any, ...]) -> None:
    for at, value in enumerate(values):
        types = _RULES[at][1].types
        if not isinstance(value, types) or (type(value) is bool and bool not in types):
            name, rule = _RULES[at]
            raise TypeError(f"Request.{name} takes {rule.takes}; got {type(value).__name__}")


def _refuse(at: int, value: object) -> Never:
    name, rule = _RULES[at]
    raise ValueError(f"Request.{name} takes {rule.takes}; got {_shown(value)}")


def _refuse_item(at: int, values: list[Any]) -> Never:
    name, rule = _RULES[at]
    assert rule.item is not None
    first = next(i for i, item in enumerate(values) if not isinstance(item, rule.item))
    raise TypeError(
        f"Request.{name} takes {rule.takes}; got {type(values[first]).__name__} at {first}"
    )


SYSTEM_JOIN: Final = "\n\n"
"""How a wire that takes the system prompt as one string joins its blocks."""


def system_text(system: str | list[TextBlock] | None) -> str | None:
    """The system prompt as one string, for a wire that takes no blocks: the
    blocks' texts joined by :data:`SYSTEM_JOIN` (a cache breakpoint on it is
    the Messages API's alone)."""
    if system is None or isinstance(system, str):
        return system
    return SYSTEM_JOIN.join(block.text for block in system)


StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn"]


def nearest_stop_reason(called_tools: bool) -> StopReason:
    """The neutral stop reason for a vendor word outside a backend's table:
    the turn that called a tool waits for its results (``tool_use``); any other
    ended (``end_turn``). Every backend falls back by this one rule."""
    return "tool_use" if called_tools else "end_turn"


"""Why a turn ended, in one vocabulary on every backend."""


class Response(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """One finished turn. ``stream`` ends with the same value ``complete`` returns.

    Equality compares the answer only: ``first_chunk_ms`` and
    ``longest_gap_ms`` are measurements of how it arrived, not part of it, so
    two Responses differing only there are equal (a stream's last item
    equals what ``complete`` returns for the same answer).

    ``request_id`` is the far end's id for the HTTP request (``None`` when it
    sent none, as Ollama never does); ``headers`` holds its rate-limit and
    retry headers by the backend's allow-list (names lowercased, never a
    credential; ``None`` when it sent none of them). On a streamed HTTP turn,
    ``first_chunk_ms`` is the time from the request being sent to its first
    content, and ``longest_gap_ms`` the longest wait between two content
    chunks (keep-alives are not content; None with fewer than two): the
    figures to choose a :attr:`Request.stall_ms` from. Both are None on a
    whole turn.
    """

    content: list[Block]
    stop_reason: StopReason | None
    vendor_stop_reason: str | None = None
    model: str | None = None
    id: str | None = None
    stop_sequence: str | None = None
    stop_details: dict[str, Any] | None = None
    usage: Usage = field(default_factory=Usage)
    extra: dict[str, Any] | None = None
    request_id: str | None = None
    headers: dict[str, str] | None = None
    first_chunk_ms: float | None = None
    longest_gap_ms: float | None = None

    def __eq__(self, other: object) -> bool:
        """Equal when they answer alike: the figures a stream measured are no
        part of the answer (so a stream's last item equals ``complete``'s)."""
        if type(other) is not Response:
            return NotImplemented
        return all(
            getattr(self, name) == getattr(other, name)
            for name in self.__struct_fields__
            if name not in _MEASURED
        )


_MEASURED: Final = frozenset({"first_chunk_ms", "longest_gap_ms"})
"""The Response fields a stream measures, left out of its equality."""


class TextDelta(Struct, frozen=True, kw_only=True):
    """Text as it arrives, for the block at ``index``."""

    type: ClassVar[str] = "text_delta"
    index: int
    text: str


class ThinkingDelta(Struct, frozen=True, kw_only=True):
    """Reasoning text as it arrives, for the block at ``index``."""

    type: ClassVar[str] = "thinking_delta"
    index: int
    thinking: str


class ToolUseStart(Struct, frozen=True, kw_only=True):
    """A tool call has begun at ``index``; its whole block follows later."""

    type: ClassVar[str] = "tool_use_start"
    index: int
    id: str
    name: str


class ToolInputDelta(Struct, frozen=True, kw_only=True):
    """A piece of the JSON of the tool call at ``index``, as it arrives: the
    pieces of one call, joined, are its input's JSON (an empty join is ``{}``)."""

    type: ClassVar[str] = "tool_input_delta"
    index: int
    partial_json: str


Delta = TextDelta | ThinkingDelta | ToolUseStart | ToolInputDelta

StreamItem = Block | Delta | Response


@runtime_checkable
class Provider(Protocol):
    """What every backend implements; an out-of-tree backend implements it too.

    ``stream`` is an async generator: it yields each content block once it is
    whole, then the final :class:`Response` (equal to what ``complete`` returns
    for the same turn); with ``deltas=True`` it also yields :data:`Delta` items
    before each block. A caller that stops early should iterate under
    ``contextlib.aclosing`` so the HTTP response is released at once. After
    ``aclose`` both refuse with :class:`~vaelii_llm.errors.LLMClosed`.
    """

    async def complete(self, request: Request) -> Response: ...

    def stream(
        self, request: Request, *, deltas: bool = False
    ) -> AsyncGenerator[StreamItem, None]: ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class ProviderBase(ClosesOnExit):
    """The async-context-manager half of :class:`Provider`, for backends to
    inherit, and :meth:`count_tokens`, which a backend with a counting
    endpoint overrides (it is not on :class:`Provider`, so a backend written
    before it still is one)."""

    async def count_tokens(self, request: Request) -> int:
        """The input tokens ``request`` would take, counted by the far end
        without running the turn. A backend with no counting endpoint raises
        :class:`~vaelii_llm.errors.LLMUnsupported`: it never guesses."""
        raise LLMUnsupported(type(self).__name__, "counting tokens")

    async def aclose(self) -> None:
        """Release what the provider holds. Closing twice is harmless."""
