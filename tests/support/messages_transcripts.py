"""Messages API transcripts derived from the final message, and hypothesis strategies for them.

:func:`transcript` takes a message shaped as the non-streamed API returns it
and produces the SSE events the API streams for the same turn, following the
API's streaming documentation and its published type definitions:

* ``message_start`` carries the message with empty ``content``, null
  ``stop_reason``/``stop_sequence``/``stop_details``, the usage known at the
  start (the input counts, ``output_tokens`` of 1, ``service_tier`` and the
  like) or no usage at all, the top-level fields known at the start, and
  ``container``/``context_management`` as null (their values come later). After
  a server-side fallback its ``model`` is the model first asked (the ``from``
  of the first ``fallback`` block), while the whole message names the model
  that served (the ``to`` of the last one).
* Each block: ``content_block_start`` with its streamed fields empty or null
  (text ``""``, thinking and signature ``""``, a tool input ``{}``, a
  compaction's ``content`` and ``encrypted_content`` null), its deltas
  (``text_delta`` and ``citations_delta`` interleaved, ``thinking_delta`` then
  one ``signature_delta``, ``input_json_delta`` cut at random points — inside
  strings, escapes and multi-byte characters too — ``compaction_delta``
  carrying ``content`` pieces and ``encrypted_content``), then
  ``content_block_stop``. Blocks that stream no deltas (``redacted_thinking``,
  ``fallback``, server tool results, anything unknown without a :class:`Plan`)
  arrive whole in their start event.
* A :class:`Plan` streams a block type nobody models by the rule the decoder
  documents: its string fields in pieces that accumulate, its list fields in
  chunks that extend, and its other fields as a run of values of which the
  last is the block's.
* ``message_delta`` with the stop reason, ``stop_sequence``, ``stop_details``
  and ``container`` in its ``delta``, ``context_management`` beside it, and the
  cumulative usage (``output_tokens`` always; the counts and breakdowns that
  grow during the turn; all of it when the start had none); then
  ``message_stop``. ``ping`` events fall anywhere after the start.

A turn cut by ``max_tokens`` inside a tool input is built with ``cut=``: the
text that was streamed for the last block's input, which then ends without
closing (and, with ``cut_stopped=False``, without its ``content_block_stop``).
The whole message then carries the lenient reading of that text, as the
non-streamed API returns it (see :func:`lenient`).
"""

from __future__ import annotations

import itertools
import json
import random
import string
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import jiter
from hypothesis import strategies as st

from tests.support.anthropic_fake import Event
from tests.support.anthropic_fake import Transcript
from tests.support.hypothesis_helpers import recursive

__all__ = [
    "Plan",
    "lenient",
    "messages",
    "transcript",
]

TOOL_INPUT_TYPES = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
"""Block types whose ``input`` streams as ``input_json_delta``."""
LATE_TOP = ("container",)
"""Top-level fields that arrive in ``message_delta.delta``."""
BESIDE_DELTA = ("context_management",)
"""Top-level fields that arrive on the ``message_delta`` event itself."""
START_USAGE = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "cache_creation",
    "service_tier",
    "inference_geo",
    "speed",
)
"""Usage fields known when the message starts."""
GROWING_USAGE = ("server_tool_use", "iterations", "output_tokens_details", "fallback_credit")
"""Usage fields that grow during the turn: sent with ``message_delta``."""
MODELLED_TOP = frozenset(
    {
        "id",
        "type",
        "role",
        "model",
        "content",
        "stop_reason",
        "stop_sequence",
        "stop_details",
        "usage",
    }
)


def lenient(partial_json: str) -> dict[str, Any]:
    """The lenient reading of a cut tool input: whole members kept, a cut
    string kept up to the cut, a cut number, literal or key dropped; nothing
    at all reads as ``{}``. This is what the test fake's non-streamed API
    answers for the same cut."""
    if not partial_json.strip():
        return {}
    value = jiter.from_json(partial_json.encode(), partial_mode="trailing-strings")
    assert isinstance(value, dict)
    return value


@dataclass(frozen=True)
class Plan:
    """How a block type nobody models streams: ``delta_type`` events carrying
    ``strings`` in pieces, ``lists`` in chunks, and ``scalars`` as a run of
    decoys ending with the block's value."""

    delta_type: str
    strings: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()
    scalars: tuple[str, ...] = ()
    null_start: bool = True  # the start event holds null for streamed strings (else "")


COMPACTION = Plan("compaction_delta", strings=("content", "encrypted_content"))
DEFAULT_PLANS: dict[str, Plan] = {"compaction": COMPACTION}


def _split(rng: random.Random, text: str, most: int) -> list[str]:
    """``text`` in 1..most pieces at random cut points (empty pieces allowed)."""
    if not text:
        return [""]
    cuts = sorted(rng.randint(0, len(text)) for _ in range(rng.randint(0, most - 1)))
    points = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(points)]


def _chunks(rng: random.Random, items: list[Any]) -> list[list[Any]]:
    if not items:
        return []
    cuts = sorted(rng.randint(0, len(items)) for _ in range(rng.randint(0, 3)))
    points = [0, *cuts, len(items)]
    return [items[a:b] for a, b in itertools.pairwise(points) if b > a]


@dataclass
class _Builder:
    rng: random.Random
    pings: bool
    plans: dict[str, Plan]
    events: list[Event] = field(default_factory=list)

    def emit(self, name: str, data: dict[str, Any]) -> None:
        self.events.append((name, {"type": name, **data}))
        if self.pings and self.rng.random() < 0.2:
            self.events.append(("ping", {"type": "ping"}))

    def start(self, index: int, block: dict[str, Any]) -> None:
        self.emit("content_block_start", {"index": index, "content_block": block})

    def delta(self, index: int, delta: dict[str, Any]) -> None:
        self.emit("content_block_delta", {"index": index, "delta": delta})

    def stop(self, index: int) -> None:
        self.emit("content_block_stop", {"index": index})

    def block(self, index: int, block: dict[str, Any], cut: str | None) -> None:
        kind = block.get("type")
        rng = self.rng
        if kind == "text":
            self._text(index, block)
        elif kind == "thinking":
            self.start(index, {**block, "thinking": "", "signature": ""})
            if block["thinking"] or rng.random() < 0.5:
                for piece in _split(rng, block["thinking"], 8):
                    self.delta(index, {"type": "thinking_delta", "thinking": piece})
            self.delta(index, {"type": "signature_delta", "signature": block["signature"]})
        elif kind in TOOL_INPUT_TYPES:
            self.start(index, {**block, "input": {}})
            text = (
                cut
                if cut is not None
                else (
                    json.dumps(block["input"], ensure_ascii=rng.random() < 0.5)
                    if block["input"]
                    else ""
                )
            )
            if rng.random() < 0.5:
                self.delta(index, {"type": "input_json_delta", "partial_json": ""})
            if text:
                for piece in _split(rng, text, 25):
                    self.delta(index, {"type": "input_json_delta", "partial_json": piece})
        elif isinstance(kind, str) and kind in self.plans:
            self._planned(index, block, self.plans[kind])
        else:  # redacted thinking, fallback, server tool results, the unknown: whole at the start
            self.start(index, dict(block))
        if cut is None or self.cut_stopped:
            self.stop(index)

    cut_stopped: bool = True

    def _text(self, index: int, block: dict[str, Any]) -> None:
        rng = self.rng
        citations = block.get("citations")
        first: dict[str, Any] = {**block, "text": ""}
        if isinstance(citations, list) and citations:
            first["citations"] = [] if rng.random() < 0.5 else None
        self.start(index, first)
        pieces = _split(rng, block["text"], 12)
        pending = list(citations) if isinstance(citations, list) else []
        for piece in pieces:
            self.delta(index, {"type": "text_delta", "text": piece})
            while pending and rng.random() < 0.5:
                self.delta(index, {"type": "citations_delta", "citation": pending.pop(0)})
        for citation in pending:
            self.delta(index, {"type": "citations_delta", "citation": citation})

    def _planned(self, index: int, block: dict[str, Any], plan: Plan) -> None:
        rng = self.rng
        first = dict(block)
        queue: list[tuple[str, Any]] = []
        for name in plan.strings:
            value = block.get(name)
            if isinstance(value, str):
                first[name] = None if plan.null_start else ""
                queue.extend((name, piece) for piece in _split(rng, value, 6))
        for name in plan.lists:
            value = block.get(name)
            if isinstance(value, list):
                chunks = _chunks(rng, value)
                keep = rng.randint(0, len(chunks)) if chunks else 0  # some arrive at the start
                first[name] = [x for c in chunks[:keep] for x in c]
                queue.extend((name, c) for c in chunks[keep:])
        for name in plan.scalars:
            if block.get(name) is not None:  # a null in a delta carries nothing: a null stays put
                first[name] = rng.randint(0, 9)
                queue.extend((name, {"decoy": i}) for i in range(rng.randint(0, 2)))
                queue.append((name, block[name]))
        self.start(index, first)
        # Deltas carry one or more fields each; a field a delta does not carry
        # is absent or null. Order within one field is kept.
        by_field: dict[str, list[Any]] = {}
        for name, value in queue:
            by_field.setdefault(name, []).append(value)
        while by_field:
            names = rng.sample(sorted(by_field), rng.randint(1, len(by_field)))
            delta: dict[str, Any] = {"type": plan.delta_type}
            for name in sorted(by_field):
                if name in names:
                    delta[name] = by_field[name].pop(0)
                    if not by_field[name]:
                        del by_field[name]
                elif rng.random() < 0.5:
                    delta[name] = None
            self.delta(index, delta)


def _fallback_models(content: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    hops = [b for b in content if b.get("type") == "fallback"]
    if not hops:
        return None, None
    return hops[0]["from"]["model"], hops[-1]["to"]["model"]


def transcript(
    message: dict[str, Any],
    rng: random.Random | None = None,
    *,
    usage_at_start: bool = True,
    pings: bool = True,
    plans: dict[str, Plan] | None = None,
    cut: str | None = None,
    cut_stopped: bool = True,
) -> Transcript:
    """The events the API streams for ``message`` (see the module docstring).

    With ``cut``, the last block is a tool call whose streamed input was
    ``cut`` when ``max_tokens`` ended the turn; ``message`` must already hold
    ``lenient(cut)`` as that block's input and ``stop_reason == "max_tokens"``.
    """
    rng = rng or random.Random(0)
    b = _Builder(rng, pings, {**DEFAULT_PLANS, **(plans or {})})
    b.cut_stopped = cut_stopped
    content = message["content"]
    if cut is not None:
        assert content
        assert content[-1]["type"] in TOOL_INPUT_TYPES
        assert content[-1]["input"] == lenient(cut)
        assert message["stop_reason"] == "max_tokens"
    first_model, served = _fallback_models(content)
    if served is not None:
        assert message["model"] == served, "the whole message names the model that served"
    usage: dict[str, Any] = message.get("usage") or {}
    start: dict[str, Any] = {
        "id": message.get("id"),
        "type": "message",
        "role": "assistant",
        "model": first_model or message.get("model"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "stop_details": None,
    }
    late = {k: message[k] for k in (*LATE_TOP, *BESIDE_DELTA) if k in message}
    for key, value in message.items():
        if key not in MODELLED_TOP:
            start[key] = None if key in late else value
    end_usage: dict[str, Any]
    if usage_at_start and usage:
        start["usage"] = {k: usage[k] for k in START_USAGE if k in usage}
        start["usage"]["output_tokens"] = 1
        end_usage = {k: usage[k] for k in GROWING_USAGE if k in usage}
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
            if k in usage and rng.random() < 0.5:  # counts are cumulative: resent or not
                end_usage[k] = usage[k]
    else:
        end_usage = dict(usage)
    end_usage["output_tokens"] = usage.get("output_tokens")
    b.emit("message_start", {"message": start})
    last = len(content) - 1
    for index, block in enumerate(content):
        b.block(index, block, cut if index == last else None)
    delta: dict[str, Any] = {
        "stop_reason": message.get("stop_reason"),
        "stop_sequence": message.get("stop_sequence"),
    }
    if "stop_details" in message:
        delta["stop_details"] = message["stop_details"]
    for key in LATE_TOP:
        if key in message:
            delta[key] = message[key]
    beside = {k: message[k] for k in BESIDE_DELTA if k in message}
    b.emit("message_delta", {"delta": delta, "usage": end_usage, **beside})
    b.events.append(("message_stop", {"type": "message_stop"}))
    return Transcript(b.events, message)


# ---------------------------------------------------------------------------
# hand-written blocks, for transcript tests


def text(body: str, citations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": body}
    if citations is not None:
        block["citations"] = citations
    return block


def citation(cited: str) -> dict[str, Any]:
    return {
        "type": "char_location",
        "cited_text": cited,
        "document_index": 0,
        "document_title": "Doc",
        "start_char_index": 0,
        "end_char_index": len(cited),
    }


def thinking(body: str, signature: str = "EqQBCkYIBxgCKkB" + "x" * 40) -> dict[str, Any]:
    return {"type": "thinking", "thinking": body, "signature": signature}


def tool_use(name: str, tool_input: dict[str, Any], tool_id: str = "toolu_01A") -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def server_tool_use(query: str, tool_id: str = "srvtoolu_01B") -> dict[str, Any]:
    return {
        "type": "server_tool_use",
        "id": tool_id,
        "name": "web_search",
        "input": {"query": query},
    }


def web_search_result(tool_id: str = "srvtoolu_01B") -> dict[str, Any]:
    return {
        "type": "web_search_tool_result",
        "tool_use_id": tool_id,
        "content": [
            {
                "type": "web_search_result",
                "title": "Birds of Europe",
                "url": "https://example.org/birds",
                "encrypted_content": "EqgfCioIARgB" + "z" * 30,
                "page_age": "2026-01-02",
            }
        ],
    }


def fallback(from_model: str, to_model: str) -> dict[str, Any]:
    return {
        "type": "fallback",
        "from": {"model": from_model},
        "to": {"model": to_model},
        "trigger": {"type": "refusal", "category": "cyber"},
    }


def compaction(summary: str | None, encrypted: str | None = "EncZ" + "q" * 50) -> dict[str, Any]:
    return {"type": "compaction", "content": summary, "encrypted_content": encrypted}


def message(
    content: list[dict[str, Any]],
    *,
    stop_reason: str = "end_turn",
    model: str = "claude-opus-5-5",
    usage: dict[str, Any] | None = None,
    **top: Any,
) -> dict[str, Any]:
    """A whole message as the non-streamed API returns it; ``top`` adds or overrides fields."""
    out: dict[str, Any] = {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage
        or {
            "input_tokens": 472,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 12,
            "output_tokens": 89,
        },
    }
    out.update(top)
    return out


# ---------------------------------------------------------------------------
# hypothesis strategies: random turns of random block types


_words = st.text(
    alphabet=st.sampled_from(list(string.ascii_letters + '  ,.é—\n"\\/{}ü😀\u2028')), max_size=60
)
_ident = st.text(alphabet=st.sampled_from(string.ascii_lowercase + "_"), min_size=1, max_size=8)
_json = recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**9), 10**9)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | _words,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_ident, children, max_size=4),
    max_leaves=12,
)
_inputs = st.dictionaries(_ident, _json, max_size=5)


@st.composite
def _text_block(draw: st.DrawFn) -> dict[str, Any]:
    cites = draw(st.none() | st.lists(_words.map(citation), max_size=3))
    return text(draw(_words), cites)


@st.composite
def _thinking_block(draw: st.DrawFn) -> dict[str, Any]:
    sig = draw(
        st.text(alphabet=string.ascii_letters + string.digits + "+/=", min_size=8, max_size=80)
    )
    return thinking(draw(_words), sig)


@st.composite
def _tool_block(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(TOOL_INPUT_TYPES)))
    block = {
        "type": kind,
        "id": "toolu_" + draw(_ident),
        "name": draw(_ident),
        "input": draw(_inputs),
    }
    if kind == "mcp_tool_use":
        block["server_name"] = draw(_ident)
    return block


@st.composite
def _mystery_block(draw: st.DrawFn, slot: int) -> tuple[dict[str, Any], Plan | None]:
    """A block type nobody models (one per ``slot``), streamed whole or by a :class:`Plan`."""
    kind = f"x_{draw(_ident)}_{slot}"
    block: dict[str, Any] = {"type": kind, "fixed": draw(_json)}
    if draw(st.booleans()):
        return block, None
    strings = tuple(f"s{i}" for i in range(draw(st.integers(0, 2))))
    lists = tuple(f"l{i}" for i in range(draw(st.integers(0, 2))))
    scalars = tuple(f"v{i}" for i in range(draw(st.integers(0, 2))))
    for name in strings:
        block[name] = draw(_words)
    for name in lists:
        block[name] = draw(st.lists(_json, max_size=5))
    for name in scalars:
        block[name] = draw(_json.filter(lambda v: not isinstance(v, (str, list)) and v is not None))
    return block, Plan(kind + "_delta", strings, lists, scalars, null_start=draw(st.booleans()))


_plain_blocks = st.one_of(
    _text_block(),
    _thinking_block(),
    st.builds(lambda d: {"type": "redacted_thinking", "data": d}, _words),
    _tool_block(),
    st.just(web_search_result()),
    st.builds(compaction, st.none() | _words, st.none() | _words),
)


@dataclass
class Turn:
    """A random whole message, how its unmodelled blocks stream, and its cut (if any)."""

    message: dict[str, Any]
    plans: dict[str, Plan]
    cut: str | None
    usage_at_start: bool
    seed: int

    def transcript(self, cut_stopped: bool = True) -> Transcript:
        return transcript(
            self.message,
            random.Random(self.seed),
            usage_at_start=self.usage_at_start,
            plans=self.plans,
            cut=self.cut,
            cut_stopped=cut_stopped,
        )


@st.composite
def messages(draw: st.DrawFn) -> Turn:
    """A random turn: random blocks (modelled and not, fallback hops first),
    stop reason, top-level and usage extras, and sometimes a cut tool input."""
    content: list[dict[str, Any]] = []
    plans: dict[str, Plan] = {}
    model = "claude-opus-5-5"
    hops = draw(st.integers(0, 2))
    names = ["claude-opus-5-5", "claude-sonnet-5", "claude-haiku-5"]
    for hop in range(hops):
        content.append(fallback(names[hop], names[hop + 1]))
        model = names[hop + 1]
    for slot in range(draw(st.integers(0, 5))):
        if draw(st.integers(0, 4)) == 0:
            block, plan = draw(_mystery_block(slot))
            if plan is not None:
                plans[block["type"]] = plan
            content.append(block)
        else:
            content.append(draw(_plain_blocks))
    stop = draw(
        st.sampled_from(
            ["end_turn", "tool_use", "max_tokens", "refusal", "stop_sequence", "pause_turn"]
        )
    )
    cut = None
    if stop == "max_tokens" and draw(st.booleans()):
        whole = draw(_inputs.filter(bool))
        full = json.dumps(whole, ensure_ascii=draw(st.booleans()))
        cut = full[: draw(st.integers(0, len(full) - 1))]
        content.append(tool_use(draw(_ident), lenient(cut), "toolu_cut"))
    usage: dict[str, Any] = {
        "input_tokens": draw(st.integers(0, 10**6)),
        "cache_creation_input_tokens": draw(st.integers(0, 100)),
        "cache_read_input_tokens": draw(st.integers(0, 100)),
        "output_tokens": draw(st.integers(1, 10**5)),
    }
    if draw(st.booleans()):
        usage["service_tier"] = "standard"
        usage["server_tool_use"] = {
            "web_search_requests": draw(st.integers(0, 5)),
            "web_fetch_requests": 0,
        }
        usage["output_tokens_details"] = {"thinking_tokens": draw(st.integers(0, 100))}
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}
    if hops:
        usage["iterations"] = [
            {
                "type": "message",
                "model": names[0],
                "input_tokens": 10,
                "output_tokens": 2,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
            {
                "type": "fallback_message",
                "model": model,
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        ]
    top: dict[str, Any] = {}
    if stop == "stop_sequence":
        top["stop_sequence"] = "STOP"
    if stop == "refusal":
        top["stop_details"] = {"type": "refusal", "category": "cyber", "explanation": "declined"}
    if draw(st.booleans()):
        top["container"] = {"id": "container_" + draw(_ident), "expires_at": "2026-12-01T08:00:00Z"}
    if draw(st.booleans()):
        top["context_management"] = {
            "applied_edits": [
                {
                    "type": "clear_tool_uses_20250919",
                    "cleared_tool_uses": 2,
                    "cleared_input_tokens": 400,
                }
            ]
        }
    if draw(st.booleans()):
        top["x_" + draw(_ident)] = draw(_json.filter(lambda v: v is not None))
    whole_message = message(content, stop_reason=stop, model=model, usage=usage, **top)
    return Turn(whole_message, plans, cut, draw(st.booleans()), draw(st.integers(0, 2**32)))


def iter_blocks(t: Transcript) -> Iterator[str]:
    """The block types a transcript starts, in order (for asserting a test covers them)."""
    for name, data in t.events:
        if name == "content_block_start":
            yield data["content_block"]["type"]
