"""A majority yes/no vote over a pool of model hosts.

``await vote(pool, question)`` asks ``votes`` times (default 3) at once and
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

A :class:`Pool` is a fixed multiset of providers held as tokens in an
:class:`asyncio.Queue`, one token per call a host takes at once.
``async with pool.provider() as p:`` takes one for the length of a call and
puts it back on every exit: normally, by exception, and by cancellation while
waiting for a token or while holding one. A pool leaking tokens one at a time
shows only as calls waiting longer, so ``pool.outstanding`` counts checked-out
providers on the pool's own counter: a nonzero count on an idle pool is a leak.

``VAELII_OLLAMA_HOSTS`` (``host[*n],…``) names the hosts :func:`pool_from_config`
spreads its calls over; :func:`stub_pool` is a pool of one stub provider, for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Generic, Literal, NamedTuple, TypeVar

from vaelii_llm import config, telemetry
from vaelii_llm._protocol import Message, Provider, Request, Response, StopReason, TextBlock
from vaelii_llm.errors import LLMBadHosts, LLMClosed, LLMError, LLMPoolTimeout
from vaelii_llm.providers._hosts import normalize_host
from vaelii_llm.providers.stub import MODEL as STUB_MODEL
from vaelii_llm.providers.stub import Entry, StubProvider

__all__ = [
    "DEFAULT_ACQUIRE_TIMEOUT_MS",
    "DEFAULT_CALLS_PER_HOST",
    "Host",
    "Pool",
    "PoolStatistics",
    "Vote",
    "hosts",
    "pool_from_config",
    "read_response",
    "read_yes_no",
    "stub_pool",
    "vote",
]

DEFAULT_ACQUIRE_TIMEOUT_MS: Final = 5 * 60 * 1000
"""How long a call waits for a provider: five minutes, a cold model load and the
queue of calls behind it."""

DEFAULT_CALLS_PER_HOST: Final = 2
"""``n`` of a ``host[*n]`` entry that names none."""

POOL_LABEL: Final = "the vote pool"

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
# The pool


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    """A snapshot of a pool. ``idle + outstanding == size`` whenever no task runs."""

    size: int
    """Tokens the pool was built with."""
    idle: int
    """Tokens in the queue, ready to hand out."""
    outstanding: int
    """Tokens checked out by calls in progress."""
    waiters: int
    """Calls waiting for a token."""


class _Closed:
    """The marker :meth:`Pool.aclose` queues to wake every waiting call."""

    __slots__ = ()


_CLOSED: Final = _Closed()


class Pool(Generic[P]):
    """A fixed multiset of providers, one queued token per call a host takes at once.

    ``tokens`` may name one provider several times (``[gpu1, gpu1, gpu2]`` lets
    two calls at once reach gpu1); the pool closes each distinct provider once
    when it closes. It refuses an empty list with
    :class:`~vaelii_llm.errors.LLMBadHosts` rather than build a pool every call
    would wait out, an entry that is not a provider with TypeError, and a
    negative ``acquire_timeout_ms`` with ValueError (0 means: only an idle
    token, never wait).

    A pool is an async context manager: leaving it closes the pool (see
    :meth:`aclose`). It belongs to the event loop that first waits on it.
    """

    __slots__ = (
        "_acquire_timeout_ms",
        "_closed",
        "_line",
        "_outstanding",
        "_queue",
        "_tokens",
        "_waiting",
    )

    def __init__(
        self,
        tokens: Iterable[P],
        *,
        acquire_timeout_ms: int = DEFAULT_ACQUIRE_TIMEOUT_MS,
    ) -> None:
        listed = list(tokens)
        if not listed:
            raise LLMBadHosts(
                "a pool needs at least one provider; with none, every call would "
                "wait out its acquire timeout"
            )
        for token in listed:
            if not isinstance(token, Provider):
                raise TypeError(f"a pool holds providers, not {type(token).__name__}")
        if isinstance(acquire_timeout_ms, bool) or not isinstance(acquire_timeout_ms, int):
            raise TypeError("acquire_timeout_ms is a whole number of milliseconds")
        if acquire_timeout_ms < 0:
            raise ValueError(f"acquire_timeout_ms cannot be negative, got {acquire_timeout_ms}")
        self._tokens: tuple[P, ...] = tuple(listed)
        self._acquire_timeout_ms = acquire_timeout_ms
        self._queue: asyncio.Queue[P | _Closed] = asyncio.Queue()
        for token in listed:
            self._queue.put_nowait(token)
        self._line = asyncio.Lock()
        self._outstanding = 0
        self._waiting = 0
        self._closed = False

    # -- what it holds -----------------------------------------------------

    @property
    def size(self) -> int:
        """How many tokens the pool holds in all: the most calls at once."""
        return len(self._tokens)

    @property
    def outstanding(self) -> int:
        """Tokens checked out right now. Nonzero on an idle pool means a leak."""
        return self._outstanding

    @property
    def acquire_timeout_ms(self) -> int:
        """How long a call waits for a token before it gives up."""
        return self._acquire_timeout_ms

    @property
    def providers(self) -> tuple[P, ...]:
        """The distinct providers, in the order the tokens first name them."""
        return tuple({id(token): token for token in self._tokens}.values())

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` has run."""
        return self._closed

    def statistics(self) -> PoolStatistics:
        """Size, idle tokens, outstanding tokens and waiting calls, right now."""
        idle = self._queue.qsize() - (1 if self._closed else 0)
        return PoolStatistics(
            size=len(self._tokens),
            idle=idle,
            outstanding=self._outstanding,
            waiters=self._waiting,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        state = "closed" if self._closed else "open"
        return (
            f"<Pool {state} size={s.size} idle={s.idle} "
            f"outstanding={s.outstanding} waiters={s.waiters}>"
        )

    # -- checking a provider out -------------------------------------------

    def provider(self) -> _Checkout[P]:
        """``async with pool.provider() as p:`` holds one token for the block.

        Calls are served first come, first served: a token handed back goes to
        the call that has waited longest, never to one arriving in that instant.
        Waits up to ``acquire_timeout_ms`` for a token, then raises
        :class:`~vaelii_llm.errors.LLMPoolTimeout` (an ``LLMTimeout`` whose
        ``phase`` is ``acquire``). The token goes back on every exit from the
        block: normally, by exception, and by cancellation. A call cancelled
        while it waits takes no token, even when a token was handed to it in
        the same instant (the queue passes that one on to the next waiter).
        Entering a closed pool, or being woken because the pool closed, raises
        :class:`~vaelii_llm.errors.LLMClosed`.
        """
        return _Checkout(self)

    async def _acquire(self) -> P:
        if self._closed:
            raise LLMClosed(POOL_LABEL)
        if self._waiting == 0 and not self._line.locked():
            try:
                token: P | _Closed = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                token = await self._wait_for_token()
        else:  # others are waiting: join the line behind them
            token = await self._wait_for_token()
        if isinstance(token, _Closed):
            # Put the marker back at once so every other waiter wakes too.
            self._queue.put_nowait(token)
            raise LLMClosed(POOL_LABEL, waited=True)
        # No await between the queue handing the token over and this count.
        self._outstanding += 1
        return token

    async def _wait_for_token(self) -> P | _Closed:
        # First come, first served: the line (an asyncio.Lock, which wakes its
        # waiters in order and lets no newcomer past them) admits one call at a
        # time to the queue, so a token handed back goes to the call that has
        # waited longest, never to one that arrived in the meantime.
        # asyncio.timeout_at runs the waits in this task. asyncio.wait_for (3.11)
        # runs them in a task of its own and can drop an item that task took in
        # the same instant the wait was cancelled; Queue.get itself hands a
        # wake-up it cannot use to the next waiter, and leaves the item queued.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._acquire_timeout_ms / 1000
        self._waiting += 1
        try:
            async with asyncio.timeout_at(deadline), self._line:
                return await self._queue.get()
        except TimeoutError as exc:
            raise LLMPoolTimeout(POOL_LABEL, self._acquire_timeout_ms) from exc
        finally:
            self._waiting -= 1

    def _release(self, token: P) -> None:
        # put_nowait on an unbounded queue never blocks and never raises, so
        # the token is back before any cancellation can be delivered.
        self._outstanding -= 1
        self._queue.put_nowait(token)

    # -- closing -----------------------------------------------------------

    async def aclose(self) -> None:
        """Close the pool and each distinct provider once. Closing twice is harmless.

        Calls waiting for a token wake with
        :class:`~vaelii_llm.errors.LLMClosed`; later calls are refused the same
        way. Calls holding a provider are not waited for: their
        provider closes under them, and their token still comes back (so
        ``outstanding`` still reaches zero). Close a pool after its calls end.
        A provider whose ``aclose`` raises does not stop the others closing; the
        first such exception is raised once all have been tried. Cancelled while
        closing, the providers not yet closed stay open.
        """
        if self._closed:
            return
        self._closed = True
        self._queue.put_nowait(_CLOSED)
        first: Exception | None = None
        for provider in self.providers:
            try:
                await provider.aclose()
            except Exception as exc:
                if first is None:
                    first = exc
        if first is not None:
            raise first

    async def __aenter__(self) -> Pool[P]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _Checkout(Generic[P]):
    """One ``async with pool.provider()``: holds a token from enter to exit."""

    __slots__ = ("_entered", "_pool", "_token")

    def __init__(self, pool: Pool[P]) -> None:
        self._pool = pool
        self._token: P | None = None
        self._entered = False

    async def __aenter__(self) -> P:
        if self._entered:
            raise RuntimeError("pool.provider() is entered once; call it again for another")
        self._entered = True
        token = await self._pool._acquire()
        self._token = token
        return token

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        if token is not None:
            self._pool._release(token)


# ---------------------------------------------------------------------------
# Voting


@dataclass(frozen=True, slots=True)
class Vote:
    """What :func:`vote` found.

    ``votes`` holds each turn's reading in turn order: ``"yes"``, ``"no"``, or
    None for a turn that gave no opinion or failed. ``tally`` counts the yes and
    no votes. ``calls`` is how many turns were asked for; ``failed`` how many of
    them raised an :class:`~vaelii_llm.errors.LLMError` or got no provider in
    time. ``calls - failed - tally["yes"] - tally["no"]`` turns answered without
    an opinion.
    """

    verdict: Verdict
    votes: tuple[YesNo | None, ...]
    tally: Mapping[YesNo, int]
    calls: int
    failed: int


def _verdict(yes: int, no: int) -> Verdict:
    if yes > no:
        return "yes"
    if no > yes:
        return "no"
    return "abstain"


class _Failed:
    __slots__ = ()


_FAILED: Final = _Failed()


async def _turn(pool: Pool[P], request: Request) -> YesNo | _Failed | None:
    try:
        async with pool.provider() as p:
            response = await p.complete(request)
    except LLMError:
        return _FAILED
    return read_response(response)


@telemetry.traced_vote
async def vote(
    pool: Pool[P],
    question: str | Request,
    votes: int = 3,
    *,
    on_vote: Callable[[Vote], None] | None = None,
) -> Vote:
    """Ask ``votes`` times at once, bounded by the pool's tokens, and count.

    ``question`` is the user message, or a whole :class:`~vaelii_llm._protocol.Request`
    when the caller sets the system prompt, ``max_tokens`` or the turn's
    ``timeout_ms``. Ask for yes or no first: the first word decides.

    ``on_vote``, when given, is called as each turn finishes with the vote so
    far: its ``votes`` hold the finished turns in the order they finished, its
    ``verdict`` and ``tally`` count them, ``calls`` is the whole vote's. A
    progress line is drawn from it; an exception it raises is a bug, as below.

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
    request = (
        question
        if isinstance(question, Request)
        else Request(messages=[Message(role="user", content=question)])
    )
    finished: list[YesNo | _Failed | None] = []

    async def counted_turn() -> YesNo | _Failed | None:
        reading = await _turn(pool, request)
        if on_vote is not None:
            finished.append(reading)
            on_vote(_count(finished, votes))
        return reading

    bug: BaseException | None = None
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(counted_turn()) for _ in range(votes)]
    except BaseExceptionGroup as raised:
        bug = raised.exceptions[0]
        others = len(raised.exceptions) - 1
        if others:
            bug.add_note(f"{others} other turn(s) of this vote raised too")
    if bug is not None:
        raise bug  # outside the except block, so the group is not its context
    return _count([task.result() for task in tasks], votes)


def _count(readings: Sequence[YesNo | _Failed | None], calls: int) -> Vote:
    failed = sum(1 for reading in readings if isinstance(reading, _Failed))
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
        failed=failed,
    )


# ---------------------------------------------------------------------------
# Hosts and building pools


class Host(NamedTuple):
    """One ``host[*n]`` entry: Ollama's base URL and how many calls it takes at once."""

    url: str
    calls: int


def hosts(explicit: str | None = None) -> list[Host]:
    """The vote pool's hosts: ``explicit``, else ``VAELII_OLLAMA_HOSTS``.

    The list is ``host[*n],…``; ``n`` defaults to 2 and each host is read as
    the Ollama backend reads one (``gpu1:8080*4`` is four calls at once to
    ``http://gpu1:8080``). Unset, it is the one configured Ollama host (two
    calls at once). Blank, it is no hosts, which :class:`Pool` refuses. An
    empty entry, a host that will not read, or an ``n`` that is not a whole
    number of at least 1 raises :class:`~vaelii_llm.errors.LLMBadHosts`
    naming the entry.
    """
    raw = config.ollama_hosts(explicit)
    if raw is None:
        configured = config.ollama_host()
        return [Host(_read_host(configured, configured), DEFAULT_CALLS_PER_HOST)]
    raw = raw.strip()
    if not raw:
        return []
    return [_read_entry(entry) for entry in raw.split(",")]


def _read_entry(entry: str) -> Host:
    text = entry.strip()
    if not text:
        raise LLMBadHosts("an entry of the host list is empty (a stray comma?)", entry)
    host, star, count = text.rpartition("*")
    if not star:
        return Host(_read_host(text, entry), DEFAULT_CALLS_PER_HOST)
    if "*" in host:
        raise LLMBadHosts("an entry names at most one *n", entry)
    count = count.strip()
    if not (count.isascii() and count.isdigit()):
        raise LLMBadHosts("a host's *n must be a whole number of calls", entry)
    calls = int(count)
    if calls < 1:
        raise LLMBadHosts("a host's *n must be at least 1", entry)
    return Host(_read_host(host, entry), calls)


def _read_host(host: str, entry: str) -> str:
    try:
        return normalize_host(host)
    except ValueError as exc:
        raise LLMBadHosts(f"a host of the list will not read ({exc})", entry) from exc


async def pool_from_config(
    explicit: str | None = None,
    *,
    model: str | None = None,
    acquire_timeout_ms: int = DEFAULT_ACQUIRE_TIMEOUT_MS,
) -> Pool[Any]:
    """A pool of Ollama providers over :func:`hosts`, one provider per entry.

    An entry's ``n`` becomes ``n`` tokens of that entry's provider. ``model``
    (None: the configured model) is passed to every provider. The Ollama
    backend is imported here, on first use, never at import. Refuses an empty
    or malformed host list with :class:`~vaelii_llm.errors.LLMBadHosts` before
    building any provider; if building one raises, those already built are
    closed before the exception propagates.
    """
    entries = hosts(explicit)
    if not entries:
        raise LLMBadHosts(
            "VAELII_OLLAMA_HOSTS is blank: no hosts, so every vote would wait out "
            "its acquire timeout"
        )
    ollama = importlib.import_module("vaelii_llm.providers.ollama")
    build: Callable[..., Provider] = ollama.provider
    opts: dict[str, Any] = {} if model is None else {"model": model}
    built: list[Provider] = []
    tokens: list[Provider] = []
    try:
        for entry in entries:
            provider = build(host=entry.url, **opts)
            built.append(provider)
            tokens.extend([provider] * entry.calls)
        return Pool(tokens, acquire_timeout_ms=acquire_timeout_ms)
    except BaseException:
        for provider in built:
            with contextlib.suppress(Exception):  # the build error is the one to raise
                await provider.aclose()
        raise


def stub_pool(
    script: Iterable[Entry] = (),
    *,
    size: int = DEFAULT_CALLS_PER_HOST,
    default: Entry = None,
    expand: Callable[[Entry], Entry] | None = None,
    acquire_timeout_ms: int = DEFAULT_ACQUIRE_TIMEOUT_MS,
) -> Pool[StubProvider]:
    """A pool of one stub provider held as ``size`` tokens, for tests.

    The stub answers ``script`` one turn per call in the order calls reach it,
    then ``default`` (see :mod:`vaelii_llm.providers.stub`);
    ``pool.providers[0].requests()`` reads back what was sent. ``size`` below 1
    is refused with ValueError.
    """
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError("size is a whole number of tokens")
    if size < 1:
        raise ValueError(f"a stub pool needs at least one token, got size={size}")
    stub = telemetry.instrument(
        StubProvider(script=script, default=default, expand=expand), "stub", model=STUB_MODEL
    )
    return Pool([stub] * size, acquire_timeout_ms=acquire_timeout_ms)
