"""Every switch the model side reads, with its legal values and default.

Each switch has one reader (its row's ``reader``), called at the moment its
value is used and never cached at import, so a test or a long-lived process
can change the environment and the next call sees it. An explicit argument
beats the environment: every reader takes ``explicit`` and uses it when it is
given (not None; for a name or a duration, not empty either). A provider kind
is read case-insensitively. From outside the package, :func:`read` reads any
switch by its name, and :func:`provider_kind` the one every caller branches on.

The engine reads none of these. The names this module does not export (the
readers but :func:`provider_kind`, the defaults, :data:`TRUTHY`,
:data:`SCHEME_PORTS`) are the package's own, each
written here once for the modules that share it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from vaelii_llm._backends import BUILTIN, STUB

__all__ = ["SWITCHES", "Switch", "provider_kind", "read"]


@dataclass(frozen=True, slots=True)
class Switch:
    """One row of the configuration table. A ``secret`` one's value is never
    shown, only whether it is set."""

    name: str
    reader: str
    legal: str
    default: str | None
    decides: str
    secret: bool = False


TRUTHY: Final = frozenset({"1", "true", "yes"})
"""The words that turn a yes/no switch on, read case-insensitively."""

SCHEME_PORTS: Final = {"http": 80, "https": 443}
"""The port a URL naming none reaches, by scheme."""

BIND_ADDRESSES: Final = frozenset({"0.0.0.0", "::", "[::]", "*"})
"""Values of ``OLLAMA_HOST`` that name an address to bind, not one to connect to."""

DEFAULT_OLLAMA_PORT: Final = 11434
"""Ollama's own port, for a host that names no scheme and no port."""

DEFAULT_OLLAMA_HOST: Final = f"http://localhost:{DEFAULT_OLLAMA_PORT}"
DEFAULT_OLLAMA_MODEL: Final = "phi4:14b"
DEFAULT_OLLAMA_GENERATION_MODEL: Final = "qwen3-coder:30b"
DEFAULT_OLLAMA_NUM_CTX: Final = 8192
DEFAULT_OLLAMA_KEEP_ALIVE: Final = "30m"
DEFAULT_ANTHROPIC_BASE_URL: Final = "https://api.anthropic.com"
DEFAULT_OPENAI_BASE_URL: Final = "https://api.openai.com/v1"

_PROVIDER = Switch(
    "VAELII_LLM_PROVIDER",
    "provider_kind",
    " ".join(backend.kind for backend in BUILTIN),
    None,
    "Which backend providers.provider() builds (unset: the stub). "
    "An explicit kind argument is read first.",
)
_OLLAMA_HOST = Switch(
    "VAELII_OLLAMA_HOST",
    "ollama_host",
    "a base URL, or a host read as Ollama reads one",
    DEFAULT_OLLAMA_HOST,
    "Where the Ollama backend connects.",
)
_OLLAMAS_OWN_HOST = Switch(
    "OLLAMA_HOST",
    "ollama_host",
    "a base URL; a bind address (0.0.0.0, ::, *) is ignored",
    None,
    "Ollama's own variable, read after VAELII_OLLAMA_HOST.",
)
_OLLAMA_MODEL = Switch(
    "VAELII_OLLAMA_MODEL",
    "ollama_model",
    "a model name",
    DEFAULT_OLLAMA_MODEL,
    "The model a turn runs.",
)
_OLLAMA_GENERATION_MODEL = Switch(
    "VAELII_OLLAMA_GENERATION_MODEL",
    "ollama_generation_model",
    "a model name",
    DEFAULT_OLLAMA_GENERATION_MODEL,
    "The model a generation turn runs.",
)
_OLLAMA_NUM_CTX = Switch(
    "VAELII_OLLAMA_NUM_CTX",
    "ollama_num_ctx",
    "a whole number of tokens",
    str(DEFAULT_OLLAMA_NUM_CTX),
    "The context length a request asks for. An unparseable value yields the default.",
)
_OLLAMA_KEEP_ALIVE = Switch(
    "VAELII_OLLAMA_KEEP_ALIVE",
    "ollama_keep_alive",
    "an Ollama duration (30m, 0)",
    DEFAULT_OLLAMA_KEEP_ALIVE,
    "How long the host is asked to hold the model resident after a turn.",
)
_OLLAMA_HOSTS = Switch(
    "VAELII_OLLAMA_HOSTS",
    "ollama_hosts",
    "host[*n],…",
    None,
    "The hosts a vote pool spreads its calls over, n calls at once per host "
    "(unset: the one host above; blank: no hosts).",
)
_POOL_REDIS_URL = Switch(
    "VAELII_POOL_REDIS_URL",
    "pool_redis_url",
    "a redis://, rediss:// or unix:// URL",
    None,
    "Where a pool built by pool.pool_from_config() keeps its per-host slots, shared by "
    "every process that names the same Redis (unset: in this process only).",
)
_ANTHROPIC_API_KEY = Switch(
    "ANTHROPIC_API_KEY",
    "anthropic_api_key",
    "an API key",
    None,
    "The credential sent as x-api-key, tried first.",
    secret=True,
)
_ANTHROPIC_AUTH_TOKEN = Switch(
    "ANTHROPIC_AUTH_TOKEN",
    "anthropic_auth_token",
    "a bearer token",
    None,
    "The credential sent as Authorization: Bearer, tried when there is no key.",
    secret=True,
)
_ANTHROPIC_BASE_URL = Switch(
    "ANTHROPIC_BASE_URL",
    "anthropic_base_url",
    "a base URL",
    DEFAULT_ANTHROPIC_BASE_URL,
    "The host the Messages API backend calls.",
)
_ANTHROPIC_MODEL = Switch(
    "VAELII_ANTHROPIC_MODEL",
    "anthropic_model",
    "a model name the host serves (a local server: the one it loaded)",
    None,
    "The model a Messages API turn names (unset: the backend's default model; "
    "llama.cpp's server answers with its one model whatever is named).",
)
_OPENAI_BASE_URL = Switch(
    "OPENAI_BASE_URL",
    "openai_base_url",
    "a base URL ending where /chat/completions and /responses hang "
    "(a local server: http://127.0.0.1:8000/v1)",
    DEFAULT_OPENAI_BASE_URL,
    "The host the OpenAI-compatible backends (Chat Completions, Responses) call.",
)
_OPENAI_API_KEY = Switch(
    "OPENAI_API_KEY",
    "openai_api_key",
    "an API key (optional: a local server needs none)",
    None,
    "The credential sent as Authorization: Bearer to the OpenAI-compatible backends.",
    secret=True,
)
_OPENAI_MODEL = Switch(
    "VAELII_OPENAI_MODEL",
    "openai_model",
    "a model name the server serves (vaelii-llm status lists them)",
    None,
    "The model an OpenAI-compatible turn runs (unset: no model is sent, and a "
    "server serving one model answers with it).",
)
_OPENAI_HOSTS = Switch(
    "VAELII_OPENAI_HOSTS",
    "openai_hosts",
    "base-url[*n],…",
    None,
    "The OpenAI-compatible hosts a vote pool spreads its calls over, n calls at once "
    "per host (unset: the one base URL above; blank: no hosts).",
)
FALSY: Final = frozenset({"0", "false", "no"})
"""The words that turn a yes/no switch that defaults to on off, read case-insensitively."""

_PROMPT_CACHE = Switch(
    "VAELII_PROMPT_CACHE",
    "prompt_cache",
    " ".join(sorted(FALSY)),
    "1",
    "Whether vaelii_llm.agent and vaelii-llm ask mark the system prompt and the tools "
    "as a cached prefix on the Messages API (any other value: on; the cache= argument "
    "and --no-cache beat it).",
)
_LIVE = Switch(
    "VAELII_LLM_LIVE",
    "live_llm",
    " ".join(sorted(TRUTHY)),
    None,
    "The consent to call a real model from a test; the llm mark is the other half.",
)
_OTEL = Switch(
    "VAELII_LLM_OTEL",
    "otel_enabled",
    " ".join(sorted(TRUTHY)),
    None,
    "Whether a provider built now records OpenTelemetry spans and metrics on the "
    "global providers; telemetry.enable() is the explicit switch.",
)

SWITCHES: tuple[Switch, ...] = (
    _PROVIDER,
    _OLLAMA_HOST,
    _OLLAMAS_OWN_HOST,
    _OLLAMA_MODEL,
    _OLLAMA_GENERATION_MODEL,
    _OLLAMA_NUM_CTX,
    _OLLAMA_KEEP_ALIVE,
    _OLLAMA_HOSTS,
    _POOL_REDIS_URL,
    _ANTHROPIC_API_KEY,
    _ANTHROPIC_AUTH_TOKEN,
    _ANTHROPIC_BASE_URL,
    _ANTHROPIC_MODEL,
    _OPENAI_BASE_URL,
    _OPENAI_API_KEY,
    _OPENAI_MODEL,
    _OPENAI_HOSTS,
    _PROMPT_CACHE,
    _LIVE,
    _OTEL,
)
"""The table, in the spec's order; each reader below takes its variable's
name from its row."""

_BY_NAME: Final = {switch.name: switch for switch in SWITCHES}


def read(name: str) -> str | int | bool | None:
    """The value the switch ``name`` has now, as the package reads it: its
    row's reader with no explicit argument (its default applied, a number
    parsed, an on/off switch a bool; ``OLLAMA_HOST`` is read as
    ``VAELII_OLLAMA_HOST``'s fallback, a provider kind in lower case). An
    unknown name is a KeyError listing the switches."""
    switch = _BY_NAME.get(name)
    if switch is None:
        raise KeyError(f"no switch {name!r}; one of {', '.join(_BY_NAME)}")
    reader: Callable[[], str | int | bool | None] = globals()[switch.reader]
    return reader()


def _environ_get() -> Callable[[str], str | None]:
    """A lookup of one variable in ``os.environ`` as it is now.

    ``os.environ.get`` of an unset variable costs a raised and caught
    KeyError, about a microsecond, on every turn that reads a switch at the
    call. CPython's ``os.environ`` keeps its variables in a plain dict of
    encoded names and values (``_data``), updated by every change made through
    it; reading that dict directly is a dict lookup. Elsewhere, or should the
    layout change, it is ``os.environ.get``.
    """
    environ = os.environ
    data = getattr(environ, "_data", None)
    encode = getattr(environ, "encodekey", None)
    decode = getattr(environ, "decodevalue", None)
    if not isinstance(data, dict) or encode is None or decode is None:
        return environ.get
    keys: dict[str, object] = {}

    def get(name: str) -> str | None:
        key = keys.get(name)
        if key is None:
            key = keys[name] = encode(name)
        value = data.get(key)
        return None if value is None else str(decode(value))

    return get


_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""What no switch value may hold once trimmed: C0 and C1 controls, DEL, the
Unicode line separators and the direction overrides. A newline in a URL would
be printed as a line of its own (a forged ``why: all good``), an escape would
drive the terminal."""


def _checked(get: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """``get``, refusing a value that holds a :data:`_CONTROL` character once
    trimmed (the stray CR/LF a .env file leaves at an end is trimmed, not
    refused) with a ValueError naming the variable, never quoting the value:
    the one check every switch's value passes, wherever it is read. A
    credential is left to the check that makes it a header
    (:class:`~vaelii_llm.errors.LLMBadCredential`, naming the header)."""
    passed: dict[str, str] = {}  # the value each name last had when it passed

    def checked(name: str) -> str | None:
        value = get(name)
        if value is None or passed.get(name) == value:
            return value
        switch = _BY_NAME.get(name)
        if switch is not None and switch.secret:  # refused as it becomes a header, naming it
            return value
        found = _CONTROL.search(value.strip())
        if found is not None:
            raise ValueError(
                f"{name} holds a control character (U+{ord(found.group()):04X}) at character "
                f"{found.start() + 1}; a switch's value is one line of printable text "
                "(value withheld)"
            )
        passed[name] = value
        return value

    return checked


_getenv: Final = _checked(_environ_get())


def _read(switch: Switch) -> str | None:
    """The switch's variable trimmed, or None when unset or blank."""
    value = _getenv(switch.name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _on(switch: Switch) -> bool:
    """Whether the switch's variable is one of the :data:`TRUTHY` words."""
    return (_read(switch) or "").lower() in TRUTHY


def provider_kind(explicit: str | None = None) -> str:
    """The backend kind to build: ``explicit``, else ``VAELII_LLM_PROVIDER``, else ``stub``.

    An unknown name is returned as given; selection refuses it with ValueError.
    """
    if explicit is not None:
        return explicit.strip().lower()
    return (_read(_PROVIDER) or STUB).lower()


def ollama_host(explicit: str | None = None) -> str:
    """The Ollama host as written (not yet normalized): ``VAELII_OLLAMA_HOST``,
    then ``OLLAMA_HOST`` unless it names a bind address, then the default."""
    if explicit is not None:
        return explicit
    ours = _read(_OLLAMA_HOST)
    if ours is not None:
        return ours
    theirs = _read(_OLLAMAS_OWN_HOST)
    if theirs is not None and not _is_bind_address(theirs):
        return theirs
    return DEFAULT_OLLAMA_HOST


def _is_bind_address(value: str) -> bool:
    host = value.split("://", 1)[-1].rstrip("/")
    if host in BIND_ADDRESSES:
        return True
    if host.startswith("["):  # [::]:11434
        return host.split("]", 1)[0] + "]" in BIND_ADDRESSES
    if host.count(":") == 1:  # 0.0.0.0:11434, *:11434
        return host.split(":", 1)[0] in BIND_ADDRESSES
    return False


def ollama_model(explicit: str | None = None) -> str:
    """The model an Ollama turn runs."""
    return explicit or _read(_OLLAMA_MODEL) or DEFAULT_OLLAMA_MODEL


def ollama_generation_model(explicit: str | None = None) -> str:
    """The model an Ollama generation turn runs."""
    return explicit or _read(_OLLAMA_GENERATION_MODEL) or DEFAULT_OLLAMA_GENERATION_MODEL


def ollama_num_ctx(explicit: int | None = None) -> int:
    """The context length asked for; an unparseable or non-positive value yields the default."""
    if explicit is not None:
        return explicit
    raw = _read(_OLLAMA_NUM_CTX)
    try:
        value = int(raw) if raw is not None else DEFAULT_OLLAMA_NUM_CTX
    except ValueError:
        return DEFAULT_OLLAMA_NUM_CTX
    return value if value > 0 else DEFAULT_OLLAMA_NUM_CTX


def ollama_keep_alive(explicit: str | None = None) -> str:
    """How long the host holds the model after a turn (always sent)."""
    return explicit or _read(_OLLAMA_KEEP_ALIVE) or DEFAULT_OLLAMA_KEEP_ALIVE


def ollama_hosts(explicit: str | None = None) -> str | None:
    """The raw ``host[*n],…`` list. None when unset; ``""`` when set but blank
    (no hosts, which the pool refuses rather than building one nobody answers)."""
    if explicit is not None:
        return explicit
    value = _getenv(_OLLAMA_HOSTS.name)
    return None if value is None else value.strip()


def pool_redis_url(explicit: str | None = None) -> str | None:
    """The Redis a pool shares its host slots through, or None for slots in this
    process. A ``user:password@`` in it is never shown
    (:func:`~vaelii_llm._transport.urls.hide_userinfo`)."""
    return explicit or _read(_POOL_REDIS_URL)


def anthropic_api_key(explicit: str | None = None) -> str | None:
    """``ANTHROPIC_API_KEY``, trimmed of the stray CR/LF a .env file leaves."""
    return explicit if explicit is not None else _read(_ANTHROPIC_API_KEY)


def anthropic_auth_token(explicit: str | None = None) -> str | None:
    """``ANTHROPIC_AUTH_TOKEN``, trimmed likewise."""
    return explicit if explicit is not None else _read(_ANTHROPIC_AUTH_TOKEN)


def anthropic_base_url(explicit: str | None = None) -> str:
    """The Messages API base URL, without a trailing slash."""
    value = explicit or _read(_ANTHROPIC_BASE_URL) or DEFAULT_ANTHROPIC_BASE_URL
    return value.rstrip("/")


def anthropic_model(explicit: str | None = None) -> str | None:
    """The model a Messages API turn names; None: the backend's default."""
    return explicit or _read(_ANTHROPIC_MODEL)


def openai_base_url(explicit: str | None = None) -> str:
    """The OpenAI-compatible base URL (where ``/chat/completions`` and
    ``/models`` hang), without a trailing slash."""
    value = explicit or _read(_OPENAI_BASE_URL) or DEFAULT_OPENAI_BASE_URL
    return value.rstrip("/")


def openai_api_key(explicit: str | None = None) -> str | None:
    """``OPENAI_API_KEY``, trimmed; None when unset or blank (a local server needs none)."""
    return explicit if explicit is not None else _read(_OPENAI_API_KEY)


def openai_model(explicit: str | None = None) -> str | None:
    """The model an OpenAI-compatible turn names; None: none is sent."""
    return explicit or _read(_OPENAI_MODEL)


def openai_hosts(explicit: str | None = None) -> str | None:
    """The raw ``base-url[*n],…`` list, read as :func:`ollama_hosts` reads its own."""
    if explicit is not None:
        return explicit
    value = _getenv(_OPENAI_HOSTS.name)
    return None if value is None else value.strip()


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
    return (_read(_PROMPT_CACHE) or "").lower() not in FALSY
