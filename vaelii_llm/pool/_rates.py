"""A pool's rates per host: requests and tokens a minute, as token buckets.

Each rated host (``host*n/600rpm/2000000tpm``) has two buckets, one of
requests and one of tokens, each holding at most one minute's worth and
refilled evenly over the minute (the burst a per-minute counter would let
through, and no more: over any window of ``w`` seconds a host gets at most
``N + N * w / 60`` of ``N`` a minute). A take needs one request and, from the
token bucket, its caller's estimate of the turn's input (at least one token,
at most the bucket's size); it is charged both before the turn starts, and
the token charge is settled to the turn's real :class:`~vaelii_llm.Usage`
(input and output) after it ends, so the bucket may run into debt that later
takes wait out.

What the far end says re-seeds the buckets: a response's remaining requests
and tokens (``x-ratelimit-remaining-*``, ``anthropic-ratelimit-*-remaining``)
lower a bucket to them, a limit below the configured one (``*-limit-*``)
lowers its size (the bucket keeping the same share of it), and a 429's
``retry-after`` (or ``retry-after-ms``) closes the host until then.
:class:`Buckets` keeps them in this process; the step script of
:mod:`vaelii_llm.pool._redis_scripts` keeps the same buckets, by the same
rule, in Redis. :class:`Seen` is what one turn told the pool, carried to
either as one :meth:`Seen.word`.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from vaelii_llm._protocol import Response
from vaelii_llm.errors import LLMApiError

__all__ = ["MINUTE_MS", "Buckets", "Rate", "Seen", "held_by", "seen"]

MINUTE_MS: Final = 60_000
"""The window a rate is counted in: a bucket refills its size once a minute."""

RATE_LIMITED: Final = 429


@dataclass(frozen=True, slots=True)
class Rate:
    """A host's requests and tokens a minute (None: unlimited)."""

    rpm: int | None = None
    tpm: int | None = None


@dataclass(frozen=True, slots=True)
class Seen:
    """What one turn told the pool of its host's limits: the tokens it spent
    (input and output), the remaining requests and tokens and the limits the
    far end reported, and how long its 429 asked the caller to wait."""

    spent: int | None = None
    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    limit_requests: int | None = None
    limit_tokens: int | None = None
    wait_ms: int | None = None

    def word(self, charged: int) -> str:
        """This, for the step script: ``delta:rr:rt:lr:lt:wait``, -1 for unknown."""
        delta = 0 if self.spent is None else self.spent - charged
        fields = (
            self.remaining_requests,
            self.remaining_tokens,
            self.limit_requests,
            self.limit_tokens,
            self.wait_ms,
        )
        return ":".join([str(delta), *("-1" if v is None else str(v) for v in fields)])


def _number(headers: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = headers.get(name)
        if value is None:
            continue
        try:
            number = float(value.strip())
        except ValueError:
            continue
        if math.isfinite(number) and number >= 0:
            return int(number)
    return None


def _wait_ms(headers: Mapping[str, str]) -> int | None:
    """A 429's ``retry-after-ms``, or ``retry-after`` in seconds or as a date."""
    ms = _number(headers, "retry-after-ms")
    if ms is not None:
        return ms
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number({"s": value}, "s")
    if seconds is not None:
        return seconds * 1000
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(int((when.timestamp() - time.time()) * 1000), 0)


def seen(response: Response | None, error: BaseException | None) -> Seen | None:
    """What a turn's response or the error it ended with says of its host's
    limits, or None when it says nothing."""
    headers: Mapping[str, str] = {}
    spent = wait = None
    if isinstance(error, LLMApiError):
        headers = error.headers
        if error.status == RATE_LIMITED:
            wait = _wait_ms(headers)
            if wait is None:
                wait = 0  # a 429 that names no wait: the request bucket is spent
    elif response is not None:
        headers = response.headers or {}
        usage = response.usage
        if usage is not None and usage.input_tokens is not None:
            spent = usage.input_tokens + (usage.output_tokens or 0)
    found = Seen(
        spent=spent,
        remaining_requests=_number(
            headers, "x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining"
        ),
        remaining_tokens=_number(
            headers, "x-ratelimit-remaining-tokens", "anthropic-ratelimit-tokens-remaining"
        ),
        limit_requests=_number(
            headers, "x-ratelimit-limit-requests", "anthropic-ratelimit-requests-limit"
        ),
        limit_tokens=_number(
            headers, "x-ratelimit-limit-tokens", "anthropic-ratelimit-tokens-limit"
        ),
        wait_ms=wait,
    )
    return None if found == Seen() else found


def held_by(host: str, why: str, rate: Rate) -> str:
    """How a timeout names what held it: a host's rate, or its 429."""
    if why == "r":
        return f"the rate {rate.rpm}rpm of {host}"
    if why == "t":
        return f"the rate {rate.tpm}tpm of {host}"
    return f"the retry-after of {host}'s 429"


class _Bucket:
    __slots__ = ("r", "req_cap", "stamp", "t", "tok_cap", "until")

    def __init__(self, rate: Rate, now: float) -> None:
        self.req_cap = float(rate.rpm or 0)
        self.tok_cap = float(rate.tpm or 0)
        self.r, self.t, self.stamp, self.until = self.req_cap, self.tok_cap, now, 0.0

    def refill(self, now: float) -> None:
        gone = max(now - self.stamp, 0.0)
        self.stamp = now
        if self.req_cap:
            self.r = min(self.req_cap, self.r + gone * self.req_cap / MINUTE_MS)
        if self.tok_cap:
            self.t = min(self.tok_cap, self.t + gone * self.tok_cap / MINUTE_MS)

    def need(self, estimate: int) -> float:
        return min(max(estimate, 1), self.tok_cap)

    def why(self, estimate: int, now: float) -> str | None:
        if self.until > now:
            return "w"
        if self.req_cap and self.r < 1:
            return "r"
        if self.tok_cap and self.t < self.need(estimate):
            return "t"
        return None

    def ready_in(self, estimate: int, now: float) -> float:
        """Milliseconds until :meth:`why` answers None (with no other take)."""
        waits = [self.until - now]
        if self.req_cap:
            waits.append((1 - self.r) * MINUTE_MS / self.req_cap)
        if self.tok_cap:
            waits.append((self.need(estimate) - self.t) * MINUTE_MS / self.tok_cap)
        return max(max(waits), 0.0)


class Buckets:
    """Each host's buckets in this process (the rule of the module docstring).

    Times are milliseconds on :func:`time.monotonic`'s clock.
    """

    __slots__ = ("_buckets", "rates")

    def __init__(self, rates: Sequence[Rate]) -> None:
        self.rates = tuple(rates)
        now = time.monotonic() * 1000
        self._buckets = tuple(_Bucket(rate, now) for rate in self.rates)

    def why(self, index: int, estimate: int, now: float) -> str | None:
        """None when host ``index`` may take ``estimate`` tokens now, else
        what holds it: ``r`` its requests, ``t`` its tokens, ``w`` a 429."""
        bucket = self._buckets[index]
        bucket.refill(now)
        return bucket.why(estimate, now)

    def ready_in(self, index: int, estimate: int, now: float) -> float:
        """Milliseconds until host ``index`` may take ``estimate`` tokens."""
        bucket = self._buckets[index]
        bucket.refill(now)
        return bucket.ready_in(estimate, now)

    def charge(self, index: int, estimate: int) -> None:
        """Take one request and ``estimate`` tokens from host ``index``."""
        bucket = self._buckets[index]
        bucket.r -= 1
        bucket.t -= min(estimate, bucket.tok_cap)

    def settle(self, index: int, seen: Seen, charged: int, now: float) -> None:
        """The turn's real tokens for its estimate, and what the far end said."""
        bucket = self._buckets[index]
        bucket.refill(now)
        if seen.spent is not None and bucket.tok_cap:
            bucket.t = max(bucket.t - (seen.spent - charged), -bucket.tok_cap)
        if seen.limit_requests is not None and bucket.req_cap:
            lowered = min(bucket.req_cap, max(seen.limit_requests, 1))
            bucket.r, bucket.req_cap = bucket.r * lowered / bucket.req_cap, lowered
        if seen.limit_tokens is not None and bucket.tok_cap:
            lowered = min(bucket.tok_cap, max(seen.limit_tokens, 1))
            bucket.t, bucket.tok_cap = bucket.t * lowered / bucket.tok_cap, lowered
        if seen.remaining_requests is not None and bucket.req_cap:
            bucket.r = min(bucket.r, seen.remaining_requests)
        if seen.remaining_tokens is not None and bucket.tok_cap:
            bucket.t = min(bucket.t, seen.remaining_tokens)
        if seen.wait_ms is not None:
            bucket.until = max(bucket.until, now + seen.wait_ms)
            bucket.r = min(bucket.r, 0)
