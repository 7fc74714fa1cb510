"""A majority yes/no vote over a :class:`~vaelii_llm.pool._pool.Pool`.

``await vote(pool, question)`` asks ``votes`` times at once and
answers a :class:`Vote`: ``"yes"`` when more counted votes say yes than no,
``"no"`` for the reverse, ``"abstain"`` on a tie (zero counted votes included).
``"abstain"`` is an outcome, not a no: a caller that records a verdict on it
records one nobody reached.

A turn that produced no opinion is not a vote: a refusal, a truncation, or prose
whose first word is neither yes nor no (:func:`read_yes_no`). Counting it would
let a model that declined three times read as a unanimous no. A turn that could
not run at all, because its provider raised an :class:`~vaelii_llm.errors.LLMError`
or no provider came free inside the pool's acquire timeout, is counted apart
under ``failed``, so a caller can tell a pool that could not ask from a model
that would not answer. Nothing here retries or sleeps: a failed turn is a
failed vote.
"""

from __future__ import annotations

import asyncio
import unicodedata
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Final
from typing import Literal
from typing import TypeVar

from vaelii_llm import telemetry
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Provider
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StopReason
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import system_text
from vaelii_llm.errors import LLMClosed
from vaelii_llm.errors import LLMError
from vaelii_llm.pool._pool import Pool
from vaelii_llm.pool._slots import POOL_LABEL
from vaelii_llm.pool._slots import Spread

__all__ = ["Vote", "asked_yes_no", "read_response", "read_yes_no", "vote"]

ASK_YES_NO: Final = "Reply with exactly one word: yes or no."
"""The system prompt of a vote asked as a plain question: a real model left
to itself answers in prose ("The answer lies in the realm of biology…"),
which is no vote; asked this, even a small one puts yes or no first."""

TRUNCATED: Final[frozenset[StopReason]] = frozenset({"max_tokens"})
"""Stop reasons that mean the answer was cut short (every backend maps its own
word, Ollama's ``length`` included, to ``max_tokens``)."""

REFUSED: Final[frozenset[StopReason]] = frozenset({"refusal"})
"""Stop reasons that mean the model declined."""

YesNo = Literal["yes", "no"]
Verdict = Literal["yes", "no", "abstain"]

P = TypeVar("P", bound=Provider)


# ---------------------------------------------------------------------------
# Reading an answer


def read_yes_no(text: str) -> YesNo | None:
    """``"yes"`` or ``"no"`` when that is the first word of ``text``, else None.

    Case and surrounding punctuation or markup do not matter: ``Yes.``,
    ``YES!``, ``**Yes**``, ``no — because …`` and ``Yes, but…`` all count.
    Only the first word is read, so a yes buried in a paragraph (``I think
    yes``) is no vote, and neither is a word that merely starts with one
    (``yesterday``, ``Nope``, ``No1``). A first word is a run of letters and
    digits; what precedes it (spaces, ``*``, quotes, a bullet) is skipped.
    """
    start = 0
    length = len(text)
    while start < length and not text[start].isalnum():
        start += 1
    end = start
    while end < length and text[end].isalnum():
        end += 1
    if end == start:
        return None
    word = unicodedata.normalize("NFKC", text[start:end]).casefold()
    if word == "yes":
        return "yes"
    if word == "no":
        return "no"
    return None


def read_response(response: Response) -> YesNo | None:
    """The opinion of one finished turn, or None when it holds none.

    A refusal and a truncation (``max_tokens``) are no
    vote even when their partial text starts with yes: a cut answer is not
    the answer the model meant to give. Otherwise the text blocks, joined in
    order, are read by :func:`read_yes_no`; thinking is not read.
    """
    if response.stop_reason in REFUSED or response.stop_reason in TRUNCATED:
        return None
    text = "".join(block.text for block in response.content if isinstance(block, TextBlock))
    return read_yes_no(text)


# ---------------------------------------------------------------------------
# Voting


@dataclass(frozen=True, slots=True)
class Vote:
    """What :func:`vote` found.

    ``votes`` holds each turn's reading in turn order: ``"yes"``, ``"no"``, or
    None for a turn that gave no opinion or failed. ``tally`` counts the yes and
    no votes. ``calls`` is how many turns were asked for; ``failed`` how many of
    them raised an :class:`~vaelii_llm.errors.LLMError` or got no provider in
    time, and ``errors`` holds those typed errors in the same order (one per
    failed turn, so a caller can say why). ``cancelled`` is how many turns an
    ``early`` vote cancelled once its verdict was certain (None in ``votes``).
    ``calls - failed - cancelled - tally["yes"] - tally["no"]`` turns answered
    without an opinion.
    """

    verdict: Verdict
    votes: tuple[YesNo | None, ...]
    tally: Mapping[YesNo, int]
    calls: int
    failed: int
    errors: tuple[LLMError, ...] = ()
    cancelled: int = 0


def _verdict(yes: int, no: int) -> Verdict:
    if yes > no:
        return "yes"
    if no > yes:
        return "no"
    return "abstain"


class _Failed:
    """A turn that could not run, and the typed error that stopped it."""

    __slots__ = ("error",)

    def __init__(self, error: LLMError) -> None:
        self.error = error


async def _turn(
    pool: Pool[P], request: Request, spread: Spread, tokens: int
) -> YesNo | _Failed | None:
    try:
        async with pool._checkout(spread, tokens) as p:
            response = await p.complete(request)
    except LLMError as error:
        return _Failed(error)
    return read_response(response)


def asked_yes_no(question: str, **fields: Any) -> Request:
    """The request a vote sends for a plain ``question``: it as the user
    message, :data:`ASK_YES_NO` as the system prompt, ``fields`` (any other
    :class:`~vaelii_llm._protocol.Request` field, ``timeout_ms``...) beside."""
    return Request(messages=[Message(role="user", content=question)], system=ASK_YES_NO, **fields)


@telemetry.traced_vote
async def vote(
    pool: Pool[P],
    question: str | Request,
    votes: int = 3,
    *,
    on_vote: Callable[[Vote], None] | None = None,
    early: bool = False,
) -> Vote:
    """Ask ``votes`` times at once, bounded by the pool's tokens, and count.

    ``question`` is the user message, sent with :data:`~vaelii_llm.pool.ASK_YES_NO` as the
    system prompt, or a whole :class:`~vaelii_llm._protocol.Request`, sent as
    it is, when the caller sets the system prompt, ``max_tokens`` or the
    turn's ``timeout_ms``. The first word decides: a request of one's own
    should ask for yes or no first too.

    ``on_vote``, when given, is called as each turn finishes with the vote so
    far: its ``votes`` hold the finished turns in the order they finished, its
    ``verdict`` and ``tally`` count them, ``calls`` is the whole vote's. A
    progress line is drawn from it; an exception it raises is a bug, as below.

    ``early=True`` stops the vote once it is decided: when the counted votes
    make the verdict certain (the turns still running could not flip it), those
    turns are cancelled, their tokens and the far end's generation freed as a
    cancelled vote's are, and ``Vote.cancelled`` counts them. The default
    waits for every turn.

    Every turn starts at once and waits its own acquire timeout for a token.
    A turn whose provider raises an :class:`~vaelii_llm.errors.LLMError`, or
    that gets no provider in time, or was still waiting for one when the pool
    closed, is a failed turn; nothing is retried.
    Any other exception from a provider is a bug, not a vote: the turns still
    running are cancelled (their tokens go back), waited for, and the first such
    exception is raised as itself, not wrapped in a group. Cancelling ``vote``
    cancels every turn and returns every token before the cancellation
    propagates. Refuses ``votes`` below 1 (ValueError) and a closed pool
    (:class:`~vaelii_llm.errors.LLMClosed`).
    """
    if isinstance(votes, bool) or not isinstance(votes, int):
        raise TypeError("votes is a whole number")
    if votes < 1:
        raise ValueError(f"a vote needs at least one turn, got votes={votes}")
    if pool.closed:
        raise LLMClosed(POOL_LABEL)
    request = question if isinstance(question, Request) else asked_yes_no(question)
    finished: list[YesNo | _Failed | None] = []
    spread = pool._spread()
    tasks: list[asyncio.Task[YesNo | _Failed | None]] = []
    tokens = _estimate(request)

    async def counted_turn() -> YesNo | _Failed | None:
        reading = await _turn(pool, request, spread, tokens)
        finished.append(reading)
        if on_vote is not None:
            on_vote(_count(finished, votes))
        if early and _decided(finished, votes):
            for task in tasks:
                if not task.done() and task is not asyncio.current_task():
                    task.cancel()
        return reading

    bug: BaseException | None = None
    try:
        async with asyncio.TaskGroup() as group:
            tasks.extend(group.create_task(counted_turn()) for _ in range(votes))
    except BaseExceptionGroup as raised:
        bug = raised.exceptions[0]
        others = len(raised.exceptions) - 1
        if others:
            bug.add_note(f"{others} other turn(s) of this vote raised too")
    if bug is not None:
        raise bug  # outside the except block, so the group is not its context
    readings = [None if task.cancelled() else task.result() for task in tasks]
    return _count(readings, votes, sum(task.cancelled() for task in tasks))


def _decided(readings: Sequence[YesNo | _Failed | None], calls: int) -> bool:
    """Whether the turns not yet finished could no longer change the verdict."""
    yes, no = readings.count("yes"), readings.count("no")
    return abs(yes - no) > calls - len(readings)


def _estimate(request: Request) -> int:
    """A turn's input tokens, roughly (four characters a token), for a rated
    pool's token bucket: the text of its system prompt and messages."""
    chars = len(system_text(request.system) or "")
    for message in request.messages:
        content = message.content
        if isinstance(content, str):
            chars += len(content)
        else:
            chars += sum(len(block.text) for block in content if isinstance(block, TextBlock))
    return chars // 4 + 1


def _count(readings: Sequence[YesNo | _Failed | None], calls: int, cancelled: int = 0) -> Vote:
    errors = tuple(reading.error for reading in readings if isinstance(reading, _Failed))
    counted: tuple[YesNo | None, ...] = tuple(
        None if isinstance(reading, _Failed) else reading for reading in readings
    )
    yes = counted.count("yes")
    no = counted.count("no")
    return Vote(
        verdict=_verdict(yes, no),
        votes=counted,
        tally={"yes": yes, "no": no},
        calls=calls,
        failed=len(errors),
        errors=errors,
        cancelled=cancelled,
    )
