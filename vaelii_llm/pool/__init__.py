"""The vote pool: a majority yes/no vote over a pool of model hosts.

``await vote(pool, question)`` asks ``votes`` times at once and
answers a :class:`Vote` whose ``verdict`` is ``"yes"``, ``"no"`` or
``"abstain"`` (a tie, zero counted votes included); only a turn whose first
word is yes or no counts (:func:`read_yes_no`), and a turn that could not run
is counted apart under ``failed``. A :class:`Pool` holds providers as tokens,
one per call a host takes at once, and gets every token back on every exit,
cancellation included.

``VAELII_OLLAMA_HOSTS`` (``host[*n],…``, read by :func:`hosts`) names the hosts
:func:`pool_from_config` spreads its calls over, or, for the OpenAI-compatible
backend (a vLLM fleet), ``VAELII_OPENAI_HOSTS`` in the same grammar: a vote's
turns go to distinct hosts where it can, among free hosts to the least busy,
and a host whose call was unreachable is passed over for a short cool-down.
A backend with no host list (the Messages API, on any server that serves
it) votes on its one configured host.
``VAELII_POOL_REDIS_URL`` keeps the ``n`` slots of each host in Redis, shared
by every worker process (the ``redis`` extra). :func:`stub_pool` is a pool of
one stub provider, for tests.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

from vaelii_llm import config
from vaelii_llm._backends import REGISTRY
from vaelii_llm._backends import STUB
from vaelii_llm._backends import pool_kind
from vaelii_llm._handout import handed_out
from vaelii_llm._protocol import Provider
from vaelii_llm.errors import LLMBadHosts
from vaelii_llm.pool._hosts import DEFAULT_CALLS_PER_HOST
from vaelii_llm.pool._hosts import Host
from vaelii_llm.pool._hosts import hosts
from vaelii_llm.pool._pool import DEFAULT_ACQUIRE_TIMEOUT_MS
from vaelii_llm.pool._pool import DEFAULT_COOLDOWN_MS
from vaelii_llm.pool._pool import DEFAULT_LEASE_TTL_MS
from vaelii_llm.pool._pool import DEFAULT_POOL_NAME
from vaelii_llm.pool._pool import Pool
from vaelii_llm.pool._vote import ASK_YES_NO
from vaelii_llm.pool._vote import Vote
from vaelii_llm.pool._vote import asked_yes_no as asked_yes_no
from vaelii_llm.pool._vote import read_yes_no
from vaelii_llm.pool._vote import vote
from vaelii_llm.providers.stub import Entry
from vaelii_llm.providers.stub import StubProvider

__all__ = [
    "ASK_YES_NO",
    "Pool",
    "Vote",
    "hosts",
    "pool_from_config",
    "read_yes_no",
    "stub_pool",
    "vote",
]


def blank_hosts(switch: str | None) -> str:
    """Why a blank host list is refused, and the two ways out."""
    return (
        f"{switch} is blank: no hosts, so every vote would wait out its acquire timeout; "
        f"unset {switch} to vote on the one configured host, or list hosts as host[*n],..."
    )


async def pool_from_config(
    explicit: str | None = None,
    *,
    kind: str | None = None,
    model: str | None = None,
    acquire_timeout_ms: int = DEFAULT_ACQUIRE_TIMEOUT_MS,
    redis_url: str | None = None,
    name: str = DEFAULT_POOL_NAME,
    lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS,
    cooldown_ms: int = DEFAULT_COOLDOWN_MS,
    max_waiting: int | None = None,
) -> Pool[Any]:
    """A pool of providers over :func:`hosts`, one provider per entry.

    ``kind`` is any registered kind but the stub: ``"ollama"`` (Ollama
    hosts, ``VAELII_OLLAMA_HOSTS``), ``"openai"`` (OpenAI-compatible base URLs,
    ``VAELII_OPENAI_HOSTS``, each provider with the configured key), one
    :func:`vaelii_llm.providers.register` added, or a kind whose record names
    no host list (``"anthropic"``: any server of the Messages API), which is
    its one configured provider held as the default ``n`` tokens; None: the
    configured kind, or ``ollama`` when that is the stub. An entry's ``n``
    becomes ``n`` tokens of that entry's provider. ``model`` (None: the
    configured model) is passed to every provider. ``redis_url`` (None:
    ``VAELII_POOL_REDIS_URL``, read now; unset: slots in this process) shares
    the slots through Redis under ``name``, with leases that expire
    ``lease_ttl_ms`` after a process stops renewing them; ``cooldown_ms`` is
    how long an unreachable host is passed over, an entry's ``/Nrpm`` and
    ``/Ntpm`` its rates, ``max_waiting`` the calls that may wait at once
    (see :class:`Pool`). The
    backend is imported here, on first use, never at import. Refuses an empty
    or malformed host list with :class:`~vaelii_llm.errors.LLMBadHosts` before
    building any provider; if building one raises, those already built are
    closed before the exception propagates.
    """
    if kind is None:
        kind = pool_kind(config.provider_kind())
    backend = REGISTRY.get(kind)
    if backend is None or backend.kind == STUB:
        kinds = ", ".join(known.kind for known in REGISTRY.values() if known.kind != STUB)
        raise ValueError(f"a pool spreads over a model backend ({kinds}), not {kind!r}")
    at = backend.host_option
    if at is None:  # no host list: the one configured host
        if explicit is not None:
            raise ValueError(f"provider {kind!r} names no pool hosts; it votes on its one host")
        entries = [Host("", DEFAULT_CALLS_PER_HOST)]
    else:
        entries = hosts(explicit, kind=kind)
    if not entries:
        raise LLMBadHosts(blank_hosts(backend.hosts_switch))
    build: Callable[..., Provider] = importlib.import_module(backend.module).provider
    opts: dict[str, Any] = {} if model is None else {"model": model}
    built: list[Provider] = []
    tokens: list[Provider] = []
    rates: dict[Provider, tuple[int | None, int | None]] = {}
    try:
        for entry in entries:
            where = {} if at is None else {at: entry.url}
            provider = handed_out(build(**where, **opts), backend.kind)
            built.append(provider)
            tokens.extend([provider] * entry.calls)
            if entry.rpm is not None or entry.tpm is not None:
                rates[provider] = (entry.rpm, entry.tpm)
        return Pool(
            tokens,
            acquire_timeout_ms=acquire_timeout_ms,
            redis_url=config.pool_redis_url(redis_url),
            name=name,
            lease_ttl_ms=lease_ttl_ms,
            cooldown_ms=cooldown_ms,
            rates=rates,
            max_waiting=max_waiting,
        )
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
    stub = handed_out(StubProvider(script=script, default=default, expand=expand), STUB)
    return Pool([stub] * size, acquire_timeout_ms=acquire_timeout_ms)
