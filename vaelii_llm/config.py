"""Every switch the model side reads, with its legal values and default.

A switch is a :class:`Switch` row holding its one reader, called at the moment
its value is used and never cached at import, so a test or a long-lived
process can change the environment and the next call sees it. An explicit
argument beats the environment: every reader takes ``explicit`` and uses it
when it is given (not None; for a name or a duration, not empty either). A
provider kind is read case-insensitively. From outside the package,
:func:`read` reads any switch by its name, and :func:`provider_kind` the one
every caller branches on.

This module holds the cross-backend switches; a backend's own are carried by
its record (:class:`vaelii_llm.providers.Backend`), the built-in ones written
beside theirs. :data:`SWITCHES` is the table of both, built-in backends
included; a kind :func:`vaelii_llm.providers.register` adds is read by
:func:`read` and listed by ``vaelii-llm config`` as they are.

The engine reads none of these. The names this module does not export (the
readers but :func:`provider_kind`, :data:`TRUTHY`, :data:`FALSY`,
:data:`SCHEME_PORTS`) are the package's own, each written here once for the
modules that share it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from vaelii_llm._backends import BUILTIN
from vaelii_llm._backends import REGISTRY
from vaelii_llm._backends import STUB
from vaelii_llm._backends import Backend
from vaelii_llm._switches import FALSY as FALSY
from vaelii_llm._switches import TRUTHY as TRUTHY
from vaelii_llm._switches import Switch
from vaelii_llm._switches import getenv
from vaelii_llm._switches import text

__all__ = ["SWITCHES", "Switch", "provider_kind", "read"]


SCHEME_PORTS: Final = {"http": 80, "https": 443}
"""The port a URL naming none reaches, by scheme."""


def provider_kind(explicit: str | None = None) -> str:
    """The backend kind to build: ``explicit``, else ``VAELII_LLM_PROVIDER``, else ``stub``.

    An unknown name is returned as given; selection refuses it with ValueError.
    """
    if explicit is not None:
        return explicit.strip().lower()
    return (text(PROVIDER) or STUB).lower()


def pool_redis_url(explicit: str | None = None) -> str | None:
    """The Redis a pool shares its host slots through, or None for slots in this
    process. A ``user:password@`` in it is never shown
    (:func:`~vaelii_llm._transport.urls.hide_userinfo`)."""
    return explicit or text(_POOL_REDIS_URL)


def live_llm() -> bool:
    """Whether a test may call a real model (``VAELII_LLM_LIVE`` is a :data:`TRUTHY` word)."""
    return _on(_LIVE)


def otel_enabled() -> bool:
    """Whether ``VAELII_LLM_OTEL`` (a :data:`TRUTHY` word) asks a provider being built
    to record OpenTelemetry spans and metrics."""
    return _on(_OTEL)


def prompt_cache(explicit: bool | None = None) -> bool:
    """Whether the agent loop caches its system prompt and tools: ``explicit``
    when given, else on unless ``VAELII_PROMPT_CACHE`` is one of the
    :data:`FALSY` words."""
    if explicit is not None:
        return explicit
    return (text(_PROMPT_CACHE) or "").lower() not in FALSY


def _on(switch: Switch) -> bool:
    """Whether the switch's variable is one of the :data:`TRUTHY` words."""
    return (text(switch) or "").lower() in TRUTHY


PROVIDER = Switch(
    "VAELII_LLM_PROVIDER",
    provider_kind,
    " ".join(backend.kind for backend in BUILTIN),
    None,
    "Which backend providers.provider() builds (unset: the stub). "
    "An explicit kind argument is read first.",
)
_POOL_REDIS_URL = Switch(
    "VAELII_POOL_REDIS_URL",
    pool_redis_url,
    "a redis://, rediss:// or unix:// URL",
    None,
    "Where a pool built by pool.pool_from_config() keeps its per-host slots, shared by "
    "every process that names the same Redis (unset: in this process only).",
)
_PROMPT_CACHE = Switch(
    "VAELII_PROMPT_CACHE",
    prompt_cache,
    " ".join(sorted(FALSY)),
    "1",
    "Whether vaelii_llm.agent and vaelii-llm ask mark the system prompt and the tools "
    "as a cached prefix on the Messages API (any other value: on; the cache= argument "
    "and --no-cache beat it).",
)
_LIVE = Switch(
    "VAELII_LLM_LIVE",
    live_llm,
    " ".join(sorted(TRUTHY)),
    None,
    "The consent to call a real model from a test; the llm mark is the other half.",
)
_OTEL = Switch(
    "VAELII_LLM_OTEL",
    otel_enabled,
    " ".join(sorted(TRUTHY)),
    None,
    "Whether a provider built now records OpenTelemetry spans and metrics on the "
    "global providers; telemetry.enable() is the explicit switch.",
)


def _table(backends: Iterable[Backend]) -> tuple[Switch, ...]:
    """The cross-backend rows around every row the ``backends`` carry, each
    name once (the first row naming it)."""
    rows: dict[str, Switch] = {PROVIDER.name: PROVIDER}
    for backend in backends:
        for row in backend.switch_table():
            rows.setdefault(row.name, row)
    for row in (_POOL_REDIS_URL, _PROMPT_CACHE, _LIVE, _OTEL):
        rows.setdefault(row.name, row)
    return tuple(rows.values())


SWITCHES: tuple[Switch, ...] = _table(BUILTIN)
"""The table: the provider kind, each built-in backend's switches as its record
carries them, then the pool's, the agent's and the test and telemetry consents.
A registered kind's switches are read and listed beside these (:func:`read`)."""

_BY_NAME: Final = {switch.name: switch for switch in SWITCHES}


def every_switch() -> tuple[Switch, ...]:
    """:data:`SWITCHES`, then each switch a registered kind's record carries
    that the table does not name, in the order the kinds were registered. A
    name is listed once, by its first row; it is a secret when any row naming
    it is one, so no record can show another's credential."""
    rows = dict(_BY_NAME)
    for backend in REGISTRY.values():
        for row in backend.switch_table():
            kept = rows.setdefault(row.name, row)
            if row.secret and not kept.secret:
                rows[row.name] = msgspec.structs.replace(kept, secret=True)
    return tuple(rows.values())


def _switch(name: str) -> Switch | None:
    found = _BY_NAME.get(name)
    if found is None:
        found = next((row for row in every_switch() if row.name == name), None)
    return found


def read(name: str) -> str | int | bool | None:
    """The value the switch ``name`` has now, as the package reads it: its
    row's reader with no explicit argument (its default applied, a number
    parsed, an on/off switch a bool; ``OLLAMA_HOST`` is read as
    ``VAELII_OLLAMA_HOST``'s fallback, a provider kind in lower case). A
    registered kind's switches are read as the built-in ones are. An unknown
    name is a KeyError listing the switches."""
    switch = _switch(name)
    if switch is None:
        listed = ", ".join(row.name for row in every_switch())
        raise KeyError(f"no switch {name!r}; one of {listed}")
    return switch.reader()


def variable(name: str) -> str | None:
    """The variable ``name`` as it is now, checked as its row's reader checks it
    (a secret row's value is left to the header check)."""
    switch = _switch(name)
    return getenv(name, secret=switch is not None and switch.secret)


def provider_chosen() -> str | None:
    """What ``VAELII_LLM_PROVIDER`` names, trimmed; None when it is unset or
    blank (the stub by default, not by choice)."""
    return text(PROVIDER)
