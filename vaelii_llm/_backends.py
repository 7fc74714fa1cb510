"""What each backend takes, declared once: its kind, its module, its options.

Selection (:mod:`vaelii_llm.providers`) checks a bag of options and hands each
backend function the options it reads from these records alone, so choosing a
kind imports that kind's module and no other. ``tests/test_providers.py`` holds
each built-in record against the real signatures of its backend's functions,
so a record and its code cannot drift apart. Imports nothing of the package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = ["BUILTIN", "ENTRY_POINTS", "STUB", "Backend", "Option"]

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
    chosen), and the options its functions take."""

    kind: str
    module: str
    options: tuple[Option, ...] = ()
    names: frozenset[str] = field(init=False, repr=False, compare=False)
    _by_entry: dict[str, frozenset[str]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [option.name for option in self.options]
        if len(names) != len(set(names)):
            raise ValueError(f"provider {self.kind!r} declares an option twice: {names}")
        object.__setattr__(self, "names", frozenset(names))
        by_entry = {
            entry: frozenset(o.name for o in self.options if entry in o.read_by)
            for entry in ENTRY_POINTS
        }
        object.__setattr__(self, "_by_entry", by_entry)

    def read_by(self, entry: str) -> frozenset[str]:
        """The options the function ``entry`` takes."""
        return self._by_entry[entry]


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
            # The warm-up's own deadline: a cold load of a big model takes minutes.
            Option("timeout_ms", "int", 300_000, ("warm",)),
            *_network(_EVERY_OLLAMA_CALL, ("provider", "generation_provider")),
        ),
    ),
    Backend(
        "anthropic",
        "vaelii_llm.providers.anthropic",
        (
            Option("credential", "str | Credential | None", None, ("provider", "available")),
            Option("base_url", "str | None", None, ("provider",)),
            Option("model", "str | None", None, ("provider",)),
            Option("effort", "str | None", None, ("provider",)),
            Option("headers", "Mapping[str, str] | None", None, ("provider",)),
            *_network(("provider",), ("provider",)),
        ),
    ),
    Backend(
        "openai",
        "vaelii_llm.providers.openai",
        (
            Option("base_url", "str | None", None, ("provider", "available")),
            Option("api_key", "str | None", None, ("provider", "available")),
            Option("model", "str | None", None, ("provider",)),
            Option("headers", "Mapping[str, str] | None", None, ("provider", "available")),
            Option("max_tokens_field", "str | None", None, ("provider",)),
            *_network(("provider", "available"), ("provider",)),
        ),
    ),
)
"""The built-in kinds, in the order the configuration table lists them."""
