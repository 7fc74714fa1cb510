"""Everything the package knows of a backend before importing it, declared once
in its record: its kind, its module, its options' names and its switches.

Selection (:mod:`vaelii_llm.providers`) checks a bag of options against the
records' names alone, so choosing a kind imports that kind's module and no
other; it then hands each of the module's functions the options its own
signature names (:func:`routed`). The vote pool
(:func:`vaelii_llm.pool.pool_from_config`) and the command read the same
record, and find the rest (a host list's reader, status lines, a tools
check) on the module by name (:func:`vaelii_llm.providers.hook`), so a kind
:func:`vaelii_llm.providers.register` adds gets them too.
``tests/providers/test_providers.py`` holds each built-in record's names to
the real signatures of its backend's functions. A record carries its switches
(:class:`~vaelii_llm._switches.Switch` rows, each with its reader), so
:mod:`vaelii_llm.config` holds only the cross-backend ones; the built-in
backends' rows and readers are written here, beside their records. Imports
nothing of the package but :mod:`vaelii_llm._switches`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import Final
from typing import Literal
from typing import Unpack
from typing import get_args
from typing import get_origin
from typing import get_type_hints

import msgspec

from vaelii_llm._switches import FALSY
from vaelii_llm._switches import TRUTHY
from vaelii_llm._switches import Switch
from vaelii_llm._switches import getenv
from vaelii_llm._switches import text
from vaelii_llm._switches import text_of

__all__ = [
    "BIND_ADDRESSES",
    "BUILTIN",
    "DEFAULT_ANTHROPIC_BASE_URL",
    "DEFAULT_OLLAMA_GENERATION_MODEL",
    "DEFAULT_OLLAMA_HOST",
    "DEFAULT_OLLAMA_KEEP_ALIVE",
    "DEFAULT_OLLAMA_MODEL",
    "DEFAULT_OLLAMA_NUM_CTX",
    "DEFAULT_OLLAMA_PORT",
    "DEFAULT_OPENAI_BASE_URL",
    "ENTRY_POINTS",
    "REGISTRY",
    "STUB",
    "Backend",
    "Hook",
    "anthropic_api_key",
    "anthropic_auth_token",
    "anthropic_base_url",
    "anthropic_model",
    "ollama_api_key",
    "ollama_generation_model",
    "ollama_host",
    "ollama_hosts",
    "ollama_keep_alive",
    "ollama_model",
    "ollama_num_ctx",
    "openai_api_key",
    "openai_base_url",
    "openai_hosts",
    "openai_model",
    "openai_send_reasoning",
    "pool_kind",
    "record",
    "routed",
    "takes",
]

ENTRY_POINTS: Final = ("provider", "generation_provider", "available", "warm")
"""The backend functions selection calls, each with the options its signature takes."""

STUB: Final = "stub"
"""The kind that always answers: the default and the fallback. Its own options
are a namespace of the bag (``stub={...}``), not options of the bag."""

Hook = Literal[
    "unavailable_reason",
    "read_host",
    "default_host",
    "status_lines",
    "cannot_call_tools",
    "drops_tools",
    "missing_model",
]
"""The functions a backend module may offer beside :data:`ENTRY_POINTS`, found
by these names when its kind is used (:class:`Backend` says what each does)."""


class Backend(msgspec.Struct, frozen=True):
    """A kind, the module that implements it (imported when the kind is
    chosen), the names of the options its functions take, and the switches
    the command and the pool read of it.

    The module offers ``provider`` and ``async available`` (and
    ``generation_provider`` and ``async warm`` where it has them: see
    :mod:`vaelii_llm.providers`); each one's signature is its contract: it
    receives the options of the bag its keyword parameters name (or the keys
    of the ``TypedDict`` its ``**options`` unpacks; a bare ``**kwargs``
    receives every one of ``options``). ``options`` names them before the
    module is imported, so a bag is checked without importing it; a test holds
    a built-in record's names to its functions' signatures. Its switches are
    ``switch_rows`` (each a :class:`vaelii_llm.config.Switch` with its
    reader, default and legal values) and the variables its roles name: its
    one host, its pool's host list, its model and its key (a secret: shown
    only as set or unset; a role's variable no row declares is read as plain
    text). ``vaelii-llm config`` lists them and ``config.read`` reads them,
    for a registered kind as for a built-in one. A kind a pool can
    spread over names ``host_option`` (the option each host's URL is given as)
    and ``hosts_switch`` (the variable holding its ``host[*n],…`` list).

    The module may also offer, by these names (:data:`Hook`):
    ``async unavailable_reason(**opts) -> str | None`` says why it cannot
    answer (taking what its signature names, as ``available`` does);
    ``read_host(text) -> url`` reads one host of the list (ValueError refuses
    it; none: the host as written); ``default_host() -> url`` is the one host
    when the list is unset (none: no host); ``status_lines(ready)``, an async
    iterator of lines, is what ``vaelii-llm status`` prints after its why-line;
    ``async cannot_call_tools() -> str | None`` says why the configured model
    cannot take tools, before ``ask`` sends them, which it then refuses (none:
    trusted); ``async drops_tools() -> str | None`` says why the configured
    server would drop them without a word, which ``ask`` says once before the
    turn, the model answering still (none: trusted);
    ``async missing_model(host) -> str | None`` says why a pool host that
    answers its probe still cannot answer a vote's turn (none: it can).
    """

    kind: str
    module: str
    options: tuple[str, ...] = ()
    host_switch: str | None = None
    hosts_switch: str | None = None
    model_switch: str | None = None
    key_switch: str | None = None
    host_option: str | None = None
    switch_rows: tuple[Switch, ...] = ()

    def __post_init__(self) -> None:
        names = self.options
        if not isinstance(names, tuple) or not all(isinstance(name, str) for name in names):
            raise TypeError(f"provider {self.kind!r}: options is a tuple of option names")
        if len(names) != len(set(names)):
            raise ValueError(f"provider {self.kind!r} declares an option twice: {names}")
        if STUB in names:
            raise ValueError(f"{STUB!r} is the stub's namespace, not an option")
        if (self.host_option is None) != (self.hosts_switch is None):
            raise ValueError(
                f"provider {self.kind!r}: a pool needs both host_option and hosts_switch"
            )
        if self.host_option is not None and self.host_option not in names:
            raise ValueError(
                f"provider {self.kind!r}: host_option {self.host_option!r} is none of its options"
            )
        self.switch_table()  # refuses rows that are not Switch rows, or one declared twice

    @property
    def names(self) -> frozenset[str]:
        """The names of the backend's options."""
        return frozenset(self.options)

    def switches(self) -> dict[str, str]:
        """Each switch the record names, and its role (host, hosts, model, key)."""
        roles = (
            ("host", self.host_switch),
            ("hosts", self.hosts_switch),
            ("model", self.model_switch),
            ("key", self.key_switch),
        )
        return {name: role for role, name in roles if name is not None}

    def switch_table(self) -> tuple[Switch, ...]:
        """Every switch the backend reads: its rows, then a plain row for each
        variable a role names that no row declares (a key's a secret)."""
        rows = self.switch_rows
        strays = [row for row in rows if not isinstance(row, Switch)]
        if not isinstance(rows, tuple) or strays:
            raise TypeError(f"provider {self.kind!r}: switch_rows is a tuple of Switch rows")
        declared = {row.name: row for row in rows}
        if len(declared) != len(rows):
            raise ValueError(f"provider {self.kind!r} declares a switch twice")
        added = []
        for name, role in self.switches().items():
            row = declared.get(name)
            if row is None:
                added.append(_plain(name, f"The {self.kind} backend's {role}.", role == "key"))
            elif role == "key" and not row.secret:
                raise ValueError(
                    f"provider {self.kind!r}: {name} is its key switch; its row is a secret"
                )
        return (*rows, *added)


def _plain(name: str, decides: str, secret: bool) -> Switch:
    """The row of a variable a role names and no row declares: read as plain
    text (trimmed; None when unset or blank), no default."""
    reader = functools.partial(text_of, name, secret=secret)
    return Switch(name, reader, "", None, decides, secret)


@functools.lru_cache(maxsize=256)
def takes(function: Callable[..., object]) -> frozenset[str] | None:
    """The keyword options ``function``'s signature names: its keyword
    parameters, and the keys of the ``TypedDict`` its ``**options`` unpacks;
    None when it takes a bare ``**kwargs`` (any option). Read once per function."""
    parameters = inspect.signature(function).parameters.values()
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    rest = next((p for p in parameters if p.kind is p.VAR_KEYWORD), None)
    if rest is None:
        return frozenset(named)
    unpacked = get_type_hints(function).get(rest.name)
    if get_origin(unpacked) is not Unpack:
        return None
    return frozenset(named.union(get_type_hints(get_args(unpacked)[0])))


def routed(
    backend: Backend, function: Callable[..., object], opts: Mapping[str, Any]
) -> dict[str, Any]:
    """The options of the bag ``opts`` that ``backend``'s ``function`` takes."""
    taken = takes(function)
    names = backend.names if taken is None else taken.intersection(backend.options)
    return {key: value for key, value in opts.items() if key in names}


# -- the built-in backends' switches, each read by its row's reader ------------------------

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


def ollama_host(explicit: str | None = None) -> str:
    """The Ollama host as written (not yet normalized): ``VAELII_OLLAMA_HOST``,
    then ``OLLAMA_HOST`` unless it names a bind address, then the default."""
    if explicit is not None:
        return explicit
    ours = text(_OLLAMA_HOST)
    if ours is not None:
        return ours
    theirs = text(_OLLAMAS_OWN_HOST)
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
    return explicit or text(_OLLAMA_MODEL) or DEFAULT_OLLAMA_MODEL


def ollama_generation_model(explicit: str | None = None) -> str:
    """The model an Ollama generation turn runs."""
    return explicit or text(_OLLAMA_GENERATION_MODEL) or DEFAULT_OLLAMA_GENERATION_MODEL


def ollama_num_ctx(explicit: int | None = None) -> int:
    """The context length asked for; an unparseable or non-positive value yields the default."""
    if explicit is not None:
        return explicit
    raw = text(_OLLAMA_NUM_CTX)
    try:
        value = int(raw) if raw is not None else DEFAULT_OLLAMA_NUM_CTX
    except ValueError:
        return DEFAULT_OLLAMA_NUM_CTX
    return value if value > 0 else DEFAULT_OLLAMA_NUM_CTX


def ollama_keep_alive(explicit: str | None = None) -> str:
    """How long the host holds the model after a turn (always sent)."""
    return explicit or text(_OLLAMA_KEEP_ALIVE) or DEFAULT_OLLAMA_KEEP_ALIVE


def ollama_api_key(explicit: str | None = None) -> str | None:
    """``OLLAMA_API_KEY``, trimmed; None when unset or blank (a local Ollama needs none)."""
    return explicit if explicit is not None else text(_OLLAMA_API_KEY)


def ollama_hosts(explicit: str | None = None) -> str | None:
    """The raw ``host[*n],…`` list. None when unset; ``""`` when set but blank
    (no hosts, which the pool refuses rather than building one nobody answers)."""
    return explicit if explicit is not None else _host_list(_OLLAMA_HOSTS)


def _host_list(switch: Switch) -> str | None:
    value = getenv(switch.name)
    return None if value is None else value.strip()


def anthropic_api_key(explicit: str | None = None) -> str | None:
    """``ANTHROPIC_API_KEY``, trimmed of the stray CR/LF a .env file leaves."""
    return explicit if explicit is not None else text(_ANTHROPIC_API_KEY)


def anthropic_auth_token(explicit: str | None = None) -> str | None:
    """``ANTHROPIC_AUTH_TOKEN``, trimmed likewise."""
    return explicit if explicit is not None else text(_ANTHROPIC_AUTH_TOKEN)


def anthropic_base_url(explicit: str | None = None) -> str:
    """The Messages API base URL, without a trailing slash."""
    value = explicit or text(_ANTHROPIC_BASE_URL) or DEFAULT_ANTHROPIC_BASE_URL
    return value.rstrip("/")


def anthropic_model(explicit: str | None = None) -> str | None:
    """The model a Messages API turn names; None: the backend's default."""
    return explicit or text(_ANTHROPIC_MODEL)


def openai_base_url(explicit: str | None = None) -> str:
    """The OpenAI-compatible base URL (where ``/chat/completions`` and
    ``/models`` hang), without a trailing slash."""
    value = explicit or text(_OPENAI_BASE_URL) or DEFAULT_OPENAI_BASE_URL
    return value.rstrip("/")


def openai_api_key(explicit: str | None = None) -> str | None:
    """``OPENAI_API_KEY``, trimmed; None when unset or blank (a local server needs none)."""
    return explicit if explicit is not None else text(_OPENAI_API_KEY)


def openai_model(explicit: str | None = None) -> str | None:
    """The model an OpenAI-compatible turn names; None: none is sent."""
    return explicit or text(_OPENAI_MODEL)


def openai_send_reasoning(explicit: bool | None = None) -> bool | None:
    """Whether the Chat Completions wire sends thinking back: ``explicit``
    when given, else ``VAELII_OPENAI_SEND_REASONING`` (a :data:`TRUTHY` or
    :data:`FALSY` word), else None: the choice by host is the wire's."""
    if explicit is not None:
        return explicit
    value = (text(_OPENAI_SEND_REASONING) or "").lower()
    return True if value in TRUTHY else False if value in FALSY else None


def openai_hosts(explicit: str | None = None) -> str | None:
    """The raw ``base-url[*n],…`` list, read as :func:`ollama_hosts` reads its own."""
    return explicit if explicit is not None else _host_list(_OPENAI_HOSTS)


_OLLAMA_HOST = Switch(
    "VAELII_OLLAMA_HOST",
    ollama_host,
    "a base URL, or a host read as Ollama reads one",
    DEFAULT_OLLAMA_HOST,
    "Where the Ollama backend connects.",
)
_OLLAMAS_OWN_HOST = Switch(
    "OLLAMA_HOST",
    ollama_host,
    "a base URL; a bind address (0.0.0.0, ::, *) is ignored",
    None,
    "Ollama's own variable, read after VAELII_OLLAMA_HOST.",
)
_OLLAMA_MODEL = Switch(
    "VAELII_OLLAMA_MODEL",
    ollama_model,
    "a model name",
    DEFAULT_OLLAMA_MODEL,
    "The model a turn runs.",
)
_OLLAMA_GENERATION_MODEL = Switch(
    "VAELII_OLLAMA_GENERATION_MODEL",
    ollama_generation_model,
    "a model name",
    DEFAULT_OLLAMA_GENERATION_MODEL,
    "The model a generation turn runs.",
)
_OLLAMA_NUM_CTX = Switch(
    "VAELII_OLLAMA_NUM_CTX",
    ollama_num_ctx,
    "a whole number of tokens",
    str(DEFAULT_OLLAMA_NUM_CTX),
    "The context length a request asks for. An unparseable value yields the default.",
)
_OLLAMA_KEEP_ALIVE = Switch(
    "VAELII_OLLAMA_KEEP_ALIVE",
    ollama_keep_alive,
    "an Ollama duration (30m, 0)",
    DEFAULT_OLLAMA_KEEP_ALIVE,
    "How long the host is asked to hold the model resident after a turn.",
)
_OLLAMA_API_KEY = Switch(
    "OLLAMA_API_KEY",
    ollama_api_key,
    "an API key (optional: a local Ollama needs none)",
    None,
    "The credential sent as Authorization: Bearer to every Ollama request, turns and "
    "probes, as the official client sends it: a hosted Ollama (https://ollama.com) asks for it.",
    secret=True,
)
_OLLAMA_HOSTS = Switch(
    "VAELII_OLLAMA_HOSTS",
    ollama_hosts,
    "host[*n][/Nrpm][/Ntpm],…",
    None,
    "The hosts a vote pool spreads its calls over, n calls at once per host, at "
    "most N requests and N tokens a minute when named (unset: the one host above; "
    "blank: no hosts).",
)
_ANTHROPIC_API_KEY = Switch(
    "ANTHROPIC_API_KEY",
    anthropic_api_key,
    "an API key",
    None,
    "The credential sent as x-api-key, tried first.",
    secret=True,
)
_ANTHROPIC_AUTH_TOKEN = Switch(
    "ANTHROPIC_AUTH_TOKEN",
    anthropic_auth_token,
    "a bearer token",
    None,
    "The credential sent as Authorization: Bearer, tried when there is no key.",
    secret=True,
)
_ANTHROPIC_BASE_URL = Switch(
    "ANTHROPIC_BASE_URL",
    anthropic_base_url,
    "a base URL",
    DEFAULT_ANTHROPIC_BASE_URL,
    "The host the Messages API backend calls.",
)
_ANTHROPIC_MODEL = Switch(
    "VAELII_ANTHROPIC_MODEL",
    anthropic_model,
    "a model name the host serves (a local server: the one it loaded)",
    None,
    "The model a Messages API turn names (unset: the backend's default model; "
    "llama.cpp's server answers with its one model whatever is named).",
)
_OPENAI_BASE_URL = Switch(
    "OPENAI_BASE_URL",
    openai_base_url,
    "a base URL ending where /chat/completions and /responses hang "
    "(a local server: http://127.0.0.1:8000/v1)",
    DEFAULT_OPENAI_BASE_URL,
    "The host the OpenAI-compatible backends (Chat Completions, Responses) call.",
)
_OPENAI_API_KEY = Switch(
    "OPENAI_API_KEY",
    openai_api_key,
    "an API key (optional: a local server needs none)",
    None,
    "The credential sent as Authorization: Bearer to the OpenAI-compatible backends.",
    secret=True,
)
_OPENAI_MODEL = Switch(
    "VAELII_OPENAI_MODEL",
    openai_model,
    "a model name the server serves (vaelii-llm status lists them)",
    None,
    "The model an OpenAI-compatible turn runs (unset: no model is sent, and a "
    "server serving one model answers with it).",
)
_OPENAI_SEND_REASONING = Switch(
    "VAELII_OPENAI_SEND_REASONING",
    openai_send_reasoning,
    " ".join(sorted(TRUTHY | FALSY)),
    None,
    "Whether the Chat Completions backend sends an assistant message's thinking back, as "
    "reasoning_content (or reasoning, where the server sent it so): DeepSeek's thinking mode "
    "and llama.cpp's server need it (unset: on, but off for OpenAI's own API; the "
    "send_reasoning option beats it).",
)
_OPENAI_HOSTS = Switch(
    "VAELII_OPENAI_HOSTS",
    openai_hosts,
    "base-url[*n][/Nrpm][/Ntpm],…",
    None,
    "The OpenAI-compatible hosts a vote pool spreads its calls over, n calls at once "
    "per host, at most N requests and N tokens a minute when named (unset: the one "
    "base URL above; blank: no hosts).",
)


_NETWORK: Final = ("proxy", "ssl", "max_connections", "session")
"""The four options every HTTP backend takes the same way (see
:class:`vaelii_llm.providers._http.NetworkOptions`)."""

_OPENAI_SERVER: Final = ("base_url", "api_key", "model", "headers")
"""What both wires of an OpenAI-compatible server take: one server, two paths."""


def _openai_server(kind: str, module: str, *own: str, rows: tuple[Switch, ...] = ()) -> Backend:
    """The record of one wire of an OpenAI-compatible server: its switches,
    hosts and probe are the server's, its ``own`` options and ``rows`` the wire's."""
    return Backend(
        kind,
        module,
        (*_OPENAI_SERVER, *own, *_NETWORK),
        host_switch=_OPENAI_BASE_URL.name,
        hosts_switch=_OPENAI_HOSTS.name,
        model_switch=_OPENAI_MODEL.name,
        key_switch=_OPENAI_API_KEY.name,
        host_option="base_url",
        switch_rows=(_OPENAI_BASE_URL, _OPENAI_API_KEY, _OPENAI_MODEL, _OPENAI_HOSTS, *rows),
    )


BUILTIN: Final = (
    Backend(STUB, "vaelii_llm.providers.stub"),
    Backend(
        "ollama",
        "vaelii_llm.providers.ollama",
        ("host", "model", "num_ctx", "keep_alive", "headers", "timeout_ms", *_NETWORK),
        host_switch=_OLLAMA_HOST.name,
        hosts_switch=_OLLAMA_HOSTS.name,
        model_switch=_OLLAMA_MODEL.name,
        key_switch=_OLLAMA_API_KEY.name,
        host_option="host",
        switch_rows=(
            _OLLAMA_HOST,
            _OLLAMAS_OWN_HOST,
            _OLLAMA_MODEL,
            _OLLAMA_GENERATION_MODEL,
            _OLLAMA_NUM_CTX,
            _OLLAMA_KEEP_ALIVE,
            _OLLAMA_API_KEY,
            _OLLAMA_HOSTS,
        ),
    ),
    Backend(
        "anthropic",
        "vaelii_llm.providers.anthropic",
        ("credential", "base_url", "model", "effort", "headers", *_NETWORK),
        host_switch=_ANTHROPIC_BASE_URL.name,
        model_switch=_ANTHROPIC_MODEL.name,
        key_switch=_ANTHROPIC_API_KEY.name,
        switch_rows=(
            _ANTHROPIC_API_KEY,
            _ANTHROPIC_AUTH_TOKEN,
            _ANTHROPIC_BASE_URL,
            _ANTHROPIC_MODEL,
        ),
    ),
    _openai_server(
        "openai",
        "vaelii_llm.providers.openai",
        "max_tokens_field",
        "send_reasoning",
        rows=(_OPENAI_SEND_REASONING,),
    ),
    # The OpenAI backend's server on another path: its switches, probe and status.
    _openai_server("openai-responses", "vaelii_llm.providers.openai_responses", "store"),
)
"""The built-in kinds, in the order the configuration table lists them: each
one's option names, which ``tests/providers/test_providers.py`` holds to the
signatures of its module's functions."""

REGISTRY: Final[dict[str, Backend]] = {backend.kind: backend for backend in BUILTIN}
"""Kind → its record: the built-in kinds, then those
:func:`vaelii_llm.providers.register` adds."""


def record(kind: str) -> Backend:
    """The record of ``kind`` (as configured: trimmed, lower case), or
    ValueError naming the kinds there are."""
    backend = REGISTRY.get(kind)
    if backend is None:
        raise ValueError(f"unknown provider kind {kind!r}; one of {sorted(REGISTRY)}")
    return backend


def nothing_configured() -> str:
    """What to set when no kind is configured: every registered kind but the stub."""
    kinds = [kind for kind in REGISTRY if kind != STUB]
    listed = " or ".join([", ".join(kinds[:-1]), kinds[-1]] if len(kinds) > 1 else kinds)
    return (
        f"nothing is configured: set VAELII_LLM_PROVIDER to {listed} "
        "(`vaelii-llm config` lists each one's switches; `vaelii-llm status` checks)"
    )


def pool_kind(configured: str) -> str:
    """The kind a pool spreads over when given none: the ``configured`` kind
    when it is a registered one other than the stub (over its host list where
    its record names one, else its one host), else ``ollama``."""
    return configured if configured in REGISTRY and configured != STUB else "ollama"
