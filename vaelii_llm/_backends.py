"""Everything the package knows of a backend, declared once in its record: its
kind, its module, its options, its pool hosts and where each part finds the
rest (its probe's reason, its status lines, its tools check).

Selection (:mod:`vaelii_llm.providers`) checks a bag of options and hands each
backend function the options it reads from these records alone, so choosing a
kind imports that kind's module and no other; the vote pool
(:func:`vaelii_llm.pool.pool_from_config`) and the command read the same
record, so a kind :func:`vaelii_llm.providers.register` adds gets them too.
``tests/providers/test_providers.py`` holds each built-in record against the real
signatures of its backend's functions, so a record and its code cannot drift
apart. Imports nothing of the package; a record names the functions it points
at as ``module:name``, imported when used (:func:`import_ref`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "BUILTIN",
    "ENTRY_POINTS",
    "REGISTRY",
    "STUB",
    "Backend",
    "Option",
    "import_ref",
    "pool_kind",
    "record",
]

ENTRY_POINTS: Final = ("provider", "generation_provider", "available", "warm")
"""The backend functions selection calls, each with the options it reads."""

STUB: Final = "stub"
"""The kind that always answers: the default and the fallback. Its own options
are a namespace of the bag (``stub={...}``), not options of the bag."""


@dataclass(frozen=True, slots=True)
class Option:
    """One keyword option of a backend: its name, its annotation as the
    backend's code writes it, its default there, and which of the backend's
    functions (:data:`ENTRY_POINTS`) take it."""

    name: str
    type: str
    default: object
    read_by: tuple[str, ...]

    def __post_init__(self) -> None:
        strays = [entry for entry in self.read_by if entry not in ENTRY_POINTS]
        if strays or not self.read_by:
            raise ValueError(
                f"option {self.name!r} is read by {self.read_by!r}; "
                f"name one or more of {ENTRY_POINTS}"
            )
        if self.name == STUB:
            raise ValueError(f"{STUB!r} is the stub's namespace, not an option")


@dataclass(frozen=True, slots=True)
class Backend:
    """A kind, the module that implements it (imported when the kind is
    chosen), the options its functions take, and what the pool and the
    command need of it.

    The module offers ``provider`` and ``async available`` (and
    ``generation_provider``, ``async warm`` and ``async unavailable_reason``
    where it has them: see :mod:`vaelii_llm.providers`). Its switches are the
    variables naming its one host, its pool's host list, its model and its
    key (a secret: shown only as set or unset); ``vaelii-llm config`` and the
    configuration table read them. A kind a pool can
    spread over names ``host_option`` (the option each host's URL is given as)
    and ``hosts_switch`` (the variable holding its ``host[*n],…`` list). Each
    ``module:name`` field points at a function, imported when used:
    ``read_host(text) -> url`` reads one host of the list (ValueError refuses
    it; unset: the host as written); ``default_host() -> url`` is the one host
    when the list is unset (unset: none); ``status_lines(ready)``, an async
    iterator of lines, is what ``vaelii-llm status`` prints after its why-line;
    ``async cannot_call_tools() -> str | None`` says why the configured model
    cannot take tools, before ``ask`` sends them, which it then refuses (unset:
    trusted); ``async drops_tools() -> str | None`` says why the configured
    server would drop them without a word, which ``ask`` says once before the
    turn, the model answering still (unset: trusted);
    ``async missing_model(host) -> str | None`` says why a pool host that
    answers its probe still cannot answer a vote's turn (unset: it can).
    """

    kind: str
    module: str
    options: tuple[Option, ...] = ()
    host_switch: str | None = None
    hosts_switch: str | None = None
    model_switch: str | None = None
    key_switch: str | None = None
    host_option: str | None = None
    read_host: str | None = None
    default_host: str | None = None
    status_lines: str | None = None
    cannot_call_tools: str | None = None
    drops_tools: str | None = None
    missing_model: str | None = None
    names: frozenset[str] = field(init=False, repr=False, compare=False)
    _by_entry: dict[str, frozenset[str]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [option.name for option in self.options]
        if len(names) != len(set(names)):
            raise ValueError(f"provider {self.kind!r} declares an option twice: {names}")
        if (self.host_option is None) != (self.hosts_switch is None):
            raise ValueError(
                f"provider {self.kind!r}: a pool needs both host_option and hosts_switch"
            )
        if self.host_option is not None and self.host_option not in names:
            raise ValueError(
                f"provider {self.kind!r}: host_option {self.host_option!r} is none of its options"
            )
        for ref in self.refs():
            if ref.count(":") != 1 or not all(ref.split(":")):
                raise ValueError(f"provider {self.kind!r}: {ref!r} is no module:name")
        object.__setattr__(self, "names", frozenset(names))
        by_entry = {
            entry: frozenset(o.name for o in self.options if entry in o.read_by)
            for entry in ENTRY_POINTS
        }
        object.__setattr__(self, "_by_entry", by_entry)

    def read_by(self, entry: str) -> frozenset[str]:
        """The options the function ``entry`` takes."""
        return self._by_entry[entry]

    def switches(self) -> dict[str, str]:
        """Each switch the record names, and its role (host, hosts, model, key)."""
        roles = (
            ("host", self.host_switch),
            ("hosts", self.hosts_switch),
            ("model", self.model_switch),
            ("key", self.key_switch),
        )
        return {name: role for role, name in roles if name is not None}

    def refs(self) -> tuple[str, ...]:
        """The ``module:name`` functions the record points at."""
        found = (
            self.read_host,
            self.default_host,
            self.status_lines,
            self.cannot_call_tools,
            self.drops_tools,
            self.missing_model,
        )
        return tuple(ref for ref in found if ref is not None)


def import_ref(ref: str) -> Callable[..., Any]:
    """The function a record's ``module:name`` points at (its module imported now)."""
    module, _, name = ref.partition(":")
    found: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return found


_EVERY_OLLAMA_CALL = ("provider", "generation_provider", "available", "warm")


def _network(reach: tuple[str, ...], pool: tuple[str, ...]) -> tuple[Option, ...]:
    """The four options every HTTP backend takes the same way (see
    :class:`vaelii_llm.providers._http.NetworkOptions`): ``proxy``, ``ssl`` and
    ``session`` read by ``reach`` (its turns and probes), ``max_connections``
    by ``pool`` (what holds a pool)."""
    return (
        Option("proxy", "str | None", None, reach),
        Option("ssl", "SSLOption", None, reach),
        Option("max_connections", "int | None", None, pool),
        Option("session", "ClientSession | None", None, reach),
    )


_OLLAMA_TURN = ("provider", "generation_provider", "warm")

OLLAMA_WARM_TIMEOUT_MS: Final = 300_000
"""The deadline of Ollama's warm-up (``warm``'s ``timeout_ms``): a cold load
of a 30B model from disk can take minutes. Held here, in the record, so the
option's default and the function's are one fact
(:data:`vaelii_llm.providers.ollama._probes.WARM_TIMEOUT_MS` is this)."""


def _openai_server_options(*own: Option) -> tuple[Option, ...]:
    """An OpenAI-compatible server's options, a wire's ``own`` among them."""
    return (
        Option("base_url", "str | None", None, ("provider", "available")),
        Option("api_key", "str | None", None, ("provider", "available")),
        Option("model", "str | None", None, ("provider",)),
        Option("headers", "Mapping[str, str] | None", None, ("provider", "available")),
        *own,
        *_network(("provider", "available"), ("provider",)),
    )


_OPENAI_SERVER: Final[dict[str, str]] = {
    "host_switch": "OPENAI_BASE_URL",
    "hosts_switch": "VAELII_OPENAI_HOSTS",
    "model_switch": "VAELII_OPENAI_MODEL",
    "key_switch": "OPENAI_API_KEY",
    "host_option": "base_url",
    "read_host": "vaelii_llm.providers._hosts:normalize_base_url",
    "default_host": "vaelii_llm.config:openai_base_url",
    "status_lines": "vaelii_llm.providers.openai._status:status_lines",
    "drops_tools": "vaelii_llm.providers.openai._status:drops_tools",
}
"""What both wires of an OpenAI-compatible server read: one server, two paths."""

BUILTIN: Final = (
    Backend(STUB, "vaelii_llm.providers.stub"),
    Backend(
        "ollama",
        "vaelii_llm.providers.ollama",
        (
            Option("host", "str | None", None, _EVERY_OLLAMA_CALL),
            Option("model", "str | None", None, _OLLAMA_TURN),
            Option("num_ctx", "int | None", None, _OLLAMA_TURN),
            Option("keep_alive", "str | None", None, _OLLAMA_TURN),
            Option("headers", "Mapping[str, str] | None", None, _OLLAMA_TURN),
            Option("timeout_ms", "int", OLLAMA_WARM_TIMEOUT_MS, ("warm",)),
            *_network(_EVERY_OLLAMA_CALL, ("provider", "generation_provider")),
        ),
        host_switch="VAELII_OLLAMA_HOST",
        hosts_switch="VAELII_OLLAMA_HOSTS",
        model_switch="VAELII_OLLAMA_MODEL",
        host_option="host",
        read_host="vaelii_llm.providers._hosts:normalize_host",
        default_host="vaelii_llm.providers._hosts:configured_ollama_host",
        status_lines="vaelii_llm.providers.ollama._status:status_lines",
        cannot_call_tools="vaelii_llm.providers.ollama._status:cannot_call_tools",
        missing_model="vaelii_llm.providers.ollama._status:missing_model",
    ),
    Backend(
        "anthropic",
        "vaelii_llm.providers.anthropic",
        (
            Option("credential", "str | Credential | None", None, ("provider", "available")),
            Option("base_url", "str | None", None, ("provider", "available")),
            Option("model", "str | None", None, ("provider",)),
            Option("effort", "str | None", None, ("provider",)),
            Option("headers", "Mapping[str, str] | None", None, ("provider",)),
            *_network(("provider", "available"), ("provider",)),
        ),
        host_switch="ANTHROPIC_BASE_URL",
        model_switch="VAELII_ANTHROPIC_MODEL",
        key_switch="ANTHROPIC_API_KEY",
        status_lines="vaelii_llm.providers.anthropic._status:status_lines",
        drops_tools="vaelii_llm.providers.anthropic._status:drops_tools",
    ),
    Backend(
        "openai",
        "vaelii_llm.providers.openai",
        _openai_server_options(Option("max_tokens_field", "str | None", None, ("provider",))),
        **_OPENAI_SERVER,
    ),
    Backend(
        # The OpenAI backend's server on another path: its switches, probe and status.
        "openai-responses",
        "vaelii_llm.providers.openai_responses",
        _openai_server_options(Option("store", "bool | None", None, ("provider",))),
        **_OPENAI_SERVER,
    ),
)
"""The built-in kinds, in the order the configuration table lists them."""

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
