"""Choosing a backend by configuration, falling back to the stub.

A kind names a backend module; the module is imported only when that kind is
chosen, so importing this package loads no HTTP library and opens no socket.
A backend module offers:

``provider(**opts)``
    a provider (an async context manager), built without I/O;
``async available(**opts) -> bool``
    whether it can answer now (Ollama's probe takes ``host``, the Messages API
    check ``credential``);
``generation_provider(**opts)`` and ``async warm(**opts)``, where it has them.

Options are one bag. :func:`provider`, :func:`generation_provider`,
:func:`available`, :func:`active_kind` and :func:`warm` accept every option
that any registered backend's ``provider``, ``generation_provider``,
``available`` or ``warm`` names as a keyword parameter, so one call
(``provider(host=h, credential=c, base_url=u)``) works whichever kind the
environment chooses. Each of those functions receives only the options its own
signature names (one taking ``**kwargs`` receives the whole bag, but names
nothing into it). An option that no registered backend names is a TypeError,
naming it, before anything is probed. The bag is read from the signatures at
call time: a kind added with :func:`register` counts from then on, and the
other backends are imported only when an option is not one the chosen backend
names. ``stub`` is the stub's own namespace (``stub={"script": [...]}``): the
stub, chosen or a fallback, is built from it alone, and a backend never sees it.

An unavailable backend, or one whose probe said yes and whose constructor then
raised, is logged at WARNING (naming the kind, never the opts, which may hold a
credential) and the stub built from ``opts["stub"]`` answers instead.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

from vaelii_llm import config
from vaelii_llm._protocol import Provider

__all__ = [
    "BACKENDS",
    "active_kind",
    "available",
    "generation_provider",
    "provider",
    "register",
    "warm",
]

log = logging.getLogger("vaelii_llm.providers")

BACKENDS: dict[str, str] = {
    "stub": "vaelii_llm.providers.stub",
    "ollama": "vaelii_llm.providers.ollama",
    "anthropic": "vaelii_llm.providers.anthropic",
}
"""Kind → the module that implements it. Tests and plug-ins add kinds with
:func:`register`."""

_ENTRY_POINTS = ("provider", "generation_provider", "available", "warm")
"""The backend functions whose keyword parameters make up the bag."""

_STUB_NAMESPACE = "stub"


def register(kind: str, module: str) -> None:
    """Make ``kind`` name the backend in ``module`` (imported when chosen)."""
    BACKENDS[kind] = module


def _backend(kind: str) -> ModuleType:
    if kind not in BACKENDS:
        raise ValueError(f"unknown provider kind {kind!r}; one of {sorted(BACKENDS)}")
    return importlib.import_module(BACKENDS[kind])


def _named(fn: Callable[..., Any]) -> tuple[frozenset[str], bool]:
    """The keyword parameters ``fn`` names, and whether it takes ``**kwargs``."""
    names: set[str] = set()
    var_keyword = False
    for param in inspect.signature(fn).parameters.values():
        if param.kind is param.VAR_KEYWORD:
            var_keyword = True
        elif param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            names.add(param.name)
    return frozenset(names), var_keyword


def _options_of(kind: str, backend: ModuleType) -> frozenset[str]:
    """Every option ``backend`` names. The stub's constructor options are its
    namespace's, not the bag's."""
    entry_points = ("available", "warm") if kind == "stub" else _ENTRY_POINTS
    names: set[str] = set()
    for name in entry_points:
        fn = getattr(backend, name, None)
        if fn is not None:
            names |= _named(fn)[0]
    return frozenset(names)


def _check(kind: str, backend: ModuleType, opts: Iterable[str]) -> None:
    """Refuse, with TypeError, an option that no registered backend names."""
    unknown = set(opts) - {_STUB_NAMESPACE} - _options_of(kind, backend)
    unimportable: list[str] = []
    for other, module in BACKENDS.items():
        if not unknown:
            return
        if other == kind:
            continue
        try:
            imported = importlib.import_module(module)
        except ImportError:
            unimportable.append(other)
            continue
        unknown -= _options_of(other, imported)
    if not unknown:
        return
    missing = f" (not imported: {', '.join(sorted(unimportable))})" if unimportable else ""
    listed = ", ".join(repr(name) for name in sorted(unknown))
    raise TypeError(
        f"provider {kind!r}: no registered backend takes the option(s) {listed}{missing}; "
        "the stub's own options go in stub={...}"
    )


def _for(fn: Callable[..., Any], opts: Mapping[str, Any]) -> dict[str, Any]:
    """The options of the bag that ``fn`` takes."""
    names, var_keyword = _named(fn)
    return {k: v for k, v in opts.items() if k != _STUB_NAMESPACE and (var_keyword or k in names)}


def _fallback(opts: Mapping[str, Any]) -> Provider:
    from vaelii_llm.providers import stub

    return stub.provider(**dict(opts.get(_STUB_NAMESPACE) or {}))


async def _probe(backend: ModuleType, opts: Mapping[str, Any]) -> bool:
    try:
        return bool(await backend.available(**_for(backend.available, opts)))
    except Exception:
        return False


async def available(kind: str | None = None, **opts: Any) -> bool:
    """Whether the backend ``kind`` (default: the configured one) can answer now.

    Takes the bag of options (see the module docstring); the probe receives the
    ones it names. Never raises for an unreachable backend; an unknown kind is
    a ValueError, an option no backend takes a TypeError.
    """
    chosen = config.provider_kind(kind)
    backend = _backend(chosen)
    _check(chosen, backend, opts)
    return await _probe(backend, opts)


async def active_kind(**opts: Any) -> str:
    """The kind :func:`provider` would hand back right now, for the same options."""
    kind = config.provider_kind()
    backend = _backend(kind)
    _check(kind, backend, opts)
    return kind if kind == "stub" or await _probe(backend, opts) else "stub"


async def _build(kind: str | None, constructor: str, opts: Mapping[str, Any]) -> Provider:
    chosen = config.provider_kind(kind)
    backend = _backend(chosen)
    _check(chosen, backend, opts)  # a misspelt option is the caller's bug, not a fallback
    if chosen == "stub":
        return _fallback(opts)
    build = getattr(backend, constructor, None) or backend.provider
    if not await _probe(backend, opts):
        log.warning("provider %s is not available; the stub answers instead", chosen)
        return _fallback(opts)
    try:
        built: Provider = build(**_for(build, opts))
    except Exception as exc:
        log.warning(
            "provider %s probed available but could not be built (%s); the stub answers instead",
            chosen,
            type(exc).__name__,
        )
        return _fallback(opts)
    return built


async def provider(kind: str | None = None, **opts: Any) -> Provider:
    """The backend ``kind`` (default: ``VAELII_LLM_PROVIDER``, else the stub),
    or the stub when it cannot answer.

    ``opts`` is one bag for every backend (the module docstring has the rule):
    the chosen backend's probe and constructor each receive the options they
    name, the stub (chosen or a fallback) is built from ``opts["stub"]`` alone,
    and an option that no registered backend takes raises TypeError before
    anything is probed. So code that passes each backend what it needs works
    whichever kind the environment names.
    """
    return await _build(kind, "provider", opts)


async def generation_provider(kind: str | None = None, **opts: Any) -> Provider:
    """:func:`provider` for a generation turn: the backend's generation
    constructor where it has one (Ollama's runs the generation model)."""
    return await _build(kind, "generation_provider", opts)


async def warm(kind: str | None = None, **opts: Any) -> object:
    """The configured backend's warm-up, or None when it has none.

    Takes the same bag as :func:`provider`; the warm-up receives the options it
    names. Raises the backend's typed error when the warm-up fails: a caller
    that asks for a resident model wants to know it is not there.
    """
    chosen = config.provider_kind(kind)
    backend = _backend(chosen)
    _check(chosen, backend, opts)
    warm_up = getattr(backend, "warm", None)
    if warm_up is None:
        return None
    result: object = await warm_up(**_for(warm_up, opts))
    return result


def __getattr__(name: str) -> ModuleType:
    """``providers.ollama`` and the like import the backend on first touch."""
    module = BACKENDS.get(name)
    if module is None or not module.startswith(__name__ + "."):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(module)
