"""The refusals a provider, the transport or the pool raises.

One class per row of the spec's refusal table, all under :class:`LLMError`::

    LLMError
    ├── LLMApiError         the far end answered an error status, or an error in a 200
    ├── LLMBadAnswer        a typed answer that did not fit its type, was cut or refused
    ├── LLMBadCredential    a credential holds a character a header cannot carry
    ├── LLMBadHosts         a pool's host list is empty or malformed
    ├── LLMBadSwitch        a switch (an environment variable) holds a control character
    ├── LLMBadResponse      a 200 whose body would not parse, or a stream cut short
    ├── LLMEncode           a content block the request encoder has no shape for
    ├── LLMNoCredential     no provider credential is set
    ├── LLMClosed           the provider or pool was closed before this call
    ├── LLMTimeout          a budget ran out (phase: connection, headers, body, stall or acquire)
    │   └── LLMPoolTimeout  no provider came free in the pool's acquire time
    ├── LLMUnreachable      refused, reset, unresolved, or no connection in time
    └── LLMUnsupported      the backend has no such operation (counting tokens)

Each class carries its spec ``type`` string (``err.type == "llm-timeout"``, one of
:data:`ErrorType`) and its data as attributes; a field whose values are known
is a ``Literal`` (:data:`ErrorType`, :data:`TimeoutPhase`). Catch
``LLMTimeout`` for every budget that ran out, or ``LLMPoolTimeout`` alone for
a busy pool, which is not a far end that went quiet; ``phase == "connection"``
tells a provider's own connections all in use from a slow far end.

The message (``str(err)``) is short on purpose: far-end text is cut to
:data:`EXCERPT_CHARS` characters, and the whole text stays on the object
(``body`` or ``text``), since a body can be megabytes of a proxy's HTML and
every log line the failure reaches would carry it. No message ever holds a credential.

``err.retryable`` says whether sending the same turn again can help: true for a
timeout, an unreachable host, and an :class:`LLMApiError` whose status is 408,
409, 429 or 5xx (an error inside a 200 counts as the status the API answers it
with, so a stream's ``overloaded_error`` is a 529); false for everything else.
The SDK never retries; the mark is for the caller's own loop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import ClassVar
from typing import Final
from typing import Literal

__all__ = [
    "EXCERPT_CHARS",
    "ErrorType",
    "LLMApiError",
    "LLMBadAnswer",
    "LLMBadCredential",
    "LLMBadHosts",
    "LLMBadResponse",
    "LLMBadSwitch",
    "LLMClosed",
    "LLMEncode",
    "LLMError",
    "LLMNoCredential",
    "LLMPoolTimeout",
    "LLMTimeout",
    "LLMUnreachable",
    "LLMUnsupported",
    "TimeoutPhase",
]

ErrorType = Literal[
    "llm-error",
    "llm-api-error",
    "llm-bad-answer",
    "llm-bad-credential",
    "llm-bad-hosts",
    "llm-bad-response",
    "llm-bad-switch",
    "llm-closed",
    "llm-encode",
    "llm-no-credential",
    "llm-pool-timeout",
    "llm-timeout",
    "llm-unreachable",
    "llm-unsupported",
]
"""Every class's ``type``: one row of the refusal table each."""

EXCERPT_CHARS = 200
"""How much far-end text a message may quote: enough to recognise an HTML error
page or a JSON error object, short enough for any log line."""


def excerpt(text: str | bytes, limit: int = EXCERPT_CHARS) -> str:
    """The opening ``limit`` characters of ``text``, marked when cut.

    Bytes are decoded leniently (a hostile body is often not UTF-8); only the
    slice that is shown is decoded, so a huge body costs nothing here.
    """
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text[: limit * 4]).decode("utf-8", "replace")
    if len(text) <= limit:
        return text
    return text[:limit] + "…"


_API_ERROR_STATUS: Final = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
"""The Messages API's error types and the statuses it answers them with."""


def _api_error_kind(body: str) -> str | None:
    """The ``error.type`` of a JSON error body, when it has one."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


def _retryable_status(status: int) -> bool:
    return status in (408, 409, 429) or status >= 500


class LLMError(Exception):
    """Base of every refusal the model side raises. ``type`` names the row;
    ``retryable`` says whether the same turn sent again can succeed."""

    type: ClassVar[ErrorType] = "llm-error"
    retryable: bool = False


class LLMApiError(LLMError):
    """The far end answered an error: a non-2xx status, or an ``error`` inside a
    200 body or a stream chunk (``status`` is then the 200 it came with).

    No retry happens anywhere: a 429 or 529 lands here like any other status,
    marked ``retryable``. ``request_id`` is the far end's id for the request
    (``None`` when it sent none); ``headers`` holds the rate-limit and retry
    headers the backend allow-lists (names lowercased; never a credential).
    ``next_step``, when the cause is known (a 404 from a base URL ending in a
    path the wire adds itself), ends the message. ``error_type`` is the
    body's ``error.type`` when it has one; ``error_status`` the status
    the error stands for: ``status``, or for an error inside a 200 the status the
    API answers that error with before a stream opens (``None`` if unknown).
    """

    type: ClassVar[ErrorType] = "llm-api-error"

    def __init__(
        self,
        label: str,
        status: int,
        body: str,
        *,
        request_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        next_step: str | None = None,
    ) -> None:
        self.label = label
        self.status = status
        self.body = body
        self.next_step = next_step
        self.request_id = request_id
        self.headers: Mapping[str, str] = headers or {}
        # An error inside a 200 is marked as the status the API answers it with.
        self.error_type = _api_error_kind(body)
        answered = status if status >= 400 else _API_ERROR_STATUS.get(self.error_type or "")
        self.error_status: int | None = answered
        self.retryable = answered is not None and _retryable_status(answered)
        then = "" if next_step is None else f"; {next_step}"
        super().__init__(f"{label} answered HTTP {status}: {excerpt(body)!r}{then}")


class LLMBadCredential(LLMError):
    """A credential holds a character an HTTP header cannot carry.

    Names the header it was meant for and never quotes the value.
    """

    type: ClassVar[ErrorType] = "llm-bad-credential"

    def __init__(self, header: str) -> None:
        self.header = header
        super().__init__(
            f"the credential for the {header} header holds a control character "
            "a header cannot carry (value withheld)"
        )


class LLMBadHosts(LLMError):
    """A pool's host list is empty, or an entry of it is not ``host[*n]``."""

    type: ClassVar[ErrorType] = "llm-bad-hosts"

    def __init__(self, reason: str, entry: str | None = None) -> None:
        self.entry = entry
        shown = f": {excerpt(entry)!r}" if entry is not None else ""
        super().__init__(f"{reason}{shown}")


class LLMBadSwitch(LLMError, ValueError):
    """A configuration switch (an environment variable) holds what no reader
    takes: a control character, read when the switch is, at a turn's start
    too (``VAELII_OLLAMA_NUM_CTX``). Names the variable (``switch``), never
    quotes the value; a ValueError as well, as a refused setting is."""

    type: ClassVar[ErrorType] = "llm-bad-switch"

    def __init__(self, switch: str, reason: str) -> None:
        self.switch = switch
        super().__init__(f"{switch} {reason}")


class LLMBadResponse(LLMError):
    """The far end answered a body that is not what the wire promises: a 200
    that will not parse, a frame over the size cap, a stream that ended
    without its terminal event. ``excerpt`` is in the message; ``text`` holds
    the whole of what was received (or the part that failed)."""

    type: ClassVar[ErrorType] = "llm-bad-response"

    def __init__(self, label: str, reason: str, text: str | bytes = "") -> None:
        self.label = label
        self.reason = reason
        self.text = text if isinstance(text, str) else bytes(text).decode("utf-8", "replace")
        self.excerpt = excerpt(self.text)
        shown = f": {self.excerpt!r}" if self.text else ""
        super().__init__(f"{label} {reason}{shown}")


class LLMBadAnswer(LLMError):
    """A typed answer (:func:`vaelii_llm.answer`) that is no value of its type:
    every attempt did not fit, or one was cut by ``max_tokens`` (``cut``) or
    refused, or the budget ran out before another. ``attempts`` holds each
    attempt's whole text and why it failed, in order; ``into`` names the type."""

    type: ClassVar[ErrorType] = "llm-bad-answer"

    def __init__(
        self, into: str, attempts: list[tuple[str, str]], reason: str, *, cut: bool = False
    ) -> None:
        self.into = into
        self.attempts = list(attempts)
        self.reason = reason
        self.cut = cut
        said = attempts[-1][1] if attempts else reason
        last = "" if said == reason else f"; the last: {excerpt(said)}"
        super().__init__(
            f"the answer is no {into} after {len(attempts)} attempt(s): {reason}{last}"
        )


class LLMClosed(LLMError):
    """Work was asked of a provider or pool after its ``aclose``, or a call was
    waiting for a pool's provider when the pool closed (``waited``)."""

    type: ClassVar[ErrorType] = "llm-closed"

    def __init__(self, label: str, *, waited: bool = False) -> None:
        self.label = label
        self.waited = waited
        when = "closed while this call waited for a provider" if waited else "is closed"
        super().__init__(f"{label} {when}")


class LLMEncode(LLMError):
    """A built content block whose ``type`` the request encoder writes no shape
    for, or, with ``reason``, one the far end is known to refuse (an image over
    its size limit or of a type it does not take, a fifth cache breakpoint):
    refused before any byte is sent."""

    type: ClassVar[ErrorType] = "llm-encode"

    def __init__(self, block_type: str, label: str, *, reason: str | None = None) -> None:
        self.block_type = block_type
        self.reason = reason
        shown = excerpt(block_type, 60)
        if reason is None:
            super().__init__(f"{label} has no wire shape for a {shown!r} block")
        else:
            super().__init__(f"{label} cannot send this {shown!r}: {reason}")


class LLMNoCredential(LLMError):
    """No provider credential is set (environment, explicit option, or CLI profile)."""

    type: ClassVar[ErrorType] = "llm-no-credential"

    def __init__(self, where: str) -> None:
        super().__init__(f"no credential found ({where})")


TimeoutPhase = Literal["connection", "headers", "body", "stall", "acquire"]
"""Where a budget ran out: waiting for one of the provider's connections to
its host to come free (every one of ``max_connections`` was in use: the turn
was never sent), waiting for the response head, reading the body, waiting
longer than the request's ``stall_ms`` for content (keep-alives are not
content), or waiting for a pool's provider."""

_PHASE_MESSAGES: dict[TimeoutPhase, str] = {
    "connection": (
        "no connection to {label} came free inside the turn's {ms} ms "
        "(all of max_connections were in use; the turn was not sent); "
        "raise the provider's max_connections, or timeout_ms (--timeout-ms)"
    ),
    "headers": (
        "{label} did not answer inside the turn's {ms} ms; "
        "raise timeout_ms (--timeout-ms) for a model this slow to start"
    ),
    "body": (
        "{label} did not finish its answer inside the turn's {ms} ms; "
        "raise timeout_ms (--timeout-ms), or ask for fewer max_tokens"
    ),
    "stall": (
        "{label} stalled: no content for {ms} ms (stall_ms), after {chunks} content chunks; "
        "raise stall_ms (--stall-ms) for a model that pauses this long"
    ),
    "acquire": (
        "{label} did not free a provider inside its acquire_timeout_ms ({ms} ms); "
        "raise acquire_timeout_ms, or give the pool more hosts or calls per host"
    ),
}
"""Each phase's message: what ran out, and the setting to raise (the
command's flag beside it where it has one)."""


class LLMTimeout(LLMError):
    """The far end stopped answering inside the turn's ``timeout_ms`` budget,
    or (``phase == "connection"``) none of the provider's connections came
    free in it.

    The budget covers the whole turn, the wait for a connection, headers and
    body: a server that drips a byte a second, or pings forever, ends here
    when the budget is spent. With ``phase == "stall"`` the far end sent no
    content for the request's ``stall_ms`` (then ``timeout_ms`` is that
    bound, and ``chunks`` counts the content chunks that came before the
    silence): it went quiet long before the whole turn's budget was spent.
    """

    type: ClassVar[ErrorType] = "llm-timeout"
    retryable = True

    def __init__(
        self, label: str, timeout_ms: int, phase: TimeoutPhase = "headers", *, chunks: int = 0
    ) -> None:
        self.label = label
        self.timeout_ms = timeout_ms
        self.phase: TimeoutPhase = phase
        self.chunks = chunks
        super().__init__(_PHASE_MESSAGES[phase].format(label=label, ms=timeout_ms, chunks=chunks))


class LLMPoolTimeout(LLMTimeout):
    """No provider came free inside the pool's acquire time: the pool is busy,
    which is not the same decision as a far end that went quiet. ``held_by``
    names what held the take: a host's rate that held a free host back, or
    the pool's ``max_waiting`` that refused it at once (``timeout_ms`` 0)."""

    type: ClassVar[ErrorType] = "llm-pool-timeout"

    def __init__(self, label: str, timeout_ms: int, *, held_by: str | None = None) -> None:
        super().__init__(label, timeout_ms, "acquire")
        self.held_by = held_by
        if held_by is not None:
            self.args = (f"{self.args[0]}; held by {held_by}",)


class LLMUnreachable(LLMError):
    """The host refused or dropped the connection, did not accept one inside
    the fixed connect deadline, or did not resolve."""

    type: ClassVar[ErrorType] = "llm-unreachable"
    retryable = True

    def __init__(self, label: str, reason: str) -> None:
        self.label = label
        self.reason = reason
        super().__init__(f"{label} is unreachable: {excerpt(reason)}")


class LLMUnsupported(LLMError):
    """The backend has no such operation (a token count where the far end has
    no counting endpoint): nothing was sent, and nothing was guessed."""

    type: ClassVar[ErrorType] = "llm-unsupported"

    def __init__(self, label: str, operation: str) -> None:
        self.operation = operation
        super().__init__(f"{label} has no endpoint for {operation}")
