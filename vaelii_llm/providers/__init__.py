"""Choosing a backend by configuration, falling back to the stub.

A kind names a backend module; the module is imported only when that kind is
chosen, so importing this package loads no HTTP library and opens no socket.
A backend module offers:

``provider(**opts)``
    a provider (an async context manager), built without I/O;
``async available(**opts) -> bool``
    whether it can answer now; it receives only the opts named in ``PROBE_OPTS``
    (Ollama's probe only ``host``, the Messages API check only ``credential``);
``generation_provider(**opts)`` and ``async warm(**opts)``, where it has them.

An unavailable backend, or one whose probe said yes and whose constructor then
raised, is logged at WARNING (naming the kind, never the opts, which may hold a
credential) and the stub built from ``opts["stub"]`` answers instead. A backend
never sees ``opts["stub"]``.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from vaelii_llm import config
from vaelii_llm.protocol import Provider

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


def register(kind: str, module: str) -> None:
    """Make ``kind`` name the backend in ``module`` (imported when chosen)."""
    BACKENDS[kind] = module


def _backend(kind: str) -> ModuleType:
    if kind not in BACKENDS:
        raise ValueError(f"unknown provider kind {kind!r}; one of {sorted(BACKENDS)}")
    return importlib.import_module(BACKENDS[kind])


def _backend_opts(opts: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in opts.items() if k != "stub"}


def _probe_opts(backend: ModuleType, opts: Mapping[str, Any]) -> dict[str, Any]:
    wanted: frozenset[str] = getattr(backend, "PROBE_OPTS", frozenset())
    return {k: v for k, v in opts.items() if k in wanted}


def _fallback(opts: Mapping[str, Any]) -> Provider:
    from vaelii_llm.providers import stub

    return stub.provider(**dict(opts.get("stub") or {}))


async def available(kind: str | None = None, **opts: Any) -> bool:
    """Whether the backend ``kind`` (default: the configured one) can answer now.

    Never raises for an unreachable backend; an unknown kind is a ValueError.
    """
    backend = _backend(config.provider_kind(kind))
    try:
        return bool(await backend.available(**_probe_opts(backend, opts)))
    except Exception:
        return False


async def active_kind(**opts: Any) -> str:
    """The kind :func:`provider` would hand back right now."""
    kind = config.provider_kind()
    return kind if kind == "stub" or await available(kind, **opts) else "stub"


async def _build(kind: str | None, constructor: str, opts: Mapping[str, Any]) -> Provider:
    chosen = config.provider_kind(kind)
    backend = _backend(chosen)
    if chosen == "stub":
        return _fallback(opts)
    build = getattr(backend, constructor, None) or backend.provider
    backend_opts = _backend_opts(opts)
    try:  # a misspelt option is the caller's bug, not an unreachable backend
        inspect.signature(build).bind(**backend_opts)
    except TypeError as exc:
        raise TypeError(f"provider {chosen!r}: {exc}") from None
    if not await available(chosen, **opts):
        log.warning("provider %s is not available; the stub answers instead", chosen)
        return _fallback(opts)
    try:
        built: Provider = build(**backend_opts)
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

    The stub, whether chosen or a fallback, is built from ``opts["stub"]``
    only, so code that passes a backend's options works whichever kind the
    environment names. An option the chosen backend's constructor does not
    take raises TypeError before anything is probed.
    """
    return await _build(kind, "provider", opts)


async def generation_provider(kind: str | None = None, **opts: Any) -> Provider:
    """:func:`provider` for a generation turn: the backend's generation
    constructor where it has one (Ollama's runs the generation model)."""
    return await _build(kind, "generation_provider", opts)


async def warm(kind: str | None = None, **opts: Any) -> object:
    """The configured backend's warm-up, or None when it has none.

    Raises the backend's typed error when the warm-up fails: a caller that asks
    for a resident model wants to know it is not there.
    """
    backend = _backend(config.provider_kind(kind))
    warm_up = getattr(backend, "warm", None)
    if warm_up is None:
        return None
    result: object = await warm_up(**_backend_opts(opts))
    return result


def __getattr__(name: str) -> ModuleType:
    """``providers.ollama`` and the like import the backend on first touch."""
    module = BACKENDS.get(name)
    if module is None or not module.startswith(__name__ + "."):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(module)
