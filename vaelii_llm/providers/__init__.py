"""Choosing a backend by configuration, falling back to the stub.

A kind names a backend module; the module is imported only when that kind is
chosen, so importing this package loads no HTTP library and opens no socket.
A backend module offers:

``provider(**opts)``
    a provider (an async context manager), built without I/O;
``async available(**opts) -> bool``
    whether it can answer now (Ollama's probe takes ``host``, the Messages API
    check ``credential``);
``generation_provider(**opts)`` and ``async warm(**opts)``, where it has them;
``async unavailable_reason(**opts) -> str | None``, where it has one: None
    when it can answer, else one line saying why and what to do (it takes what
    ``available`` takes; :func:`unavailable_reason` reads it).

Options are one bag. :func:`provider`, :func:`generation_provider`,
:func:`available`, :func:`active_kind` and :func:`warm` accept every option
that any registered kind names (each kind's record names its options once;
its functions' signatures say which of them each one takes), so one call
(``provider(host=h, credential=c, base_url=u)``) works whichever kind the
environment chooses. Each function of the chosen backend receives only the
options its own signature takes. An option that no registered kind names is a
TypeError, naming it, before anything is probed. Checking reads the records
alone: no backend but the chosen one is imported. ``stub`` is the
stub's own namespace (``stub={"script": [...]}``): the stub, chosen or a
fallback, is built from it alone, and a backend never sees it.

An unavailable backend, or one whose probe said yes and whose constructor then
raised, is logged at WARNING (naming the kind, never the opts, which may hold a
credential) and the stub built from ``opts["stub"]`` answers instead.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from types import ModuleType
from typing import Any
from typing import Final

import msgspec

from vaelii_llm import config
from vaelii_llm._backends import REGISTRY
from vaelii_llm._backends import STUB
from vaelii_llm._backends import Backend
from vaelii_llm._backends import Hook
from vaelii_llm._backends import record
from vaelii_llm._backends import routed
from vaelii_llm._handout import handed_out
from vaelii_llm._protocol import Provider

__all__ = [
    "Backend",
    "active_kind",
    "available",
    "generation_provider",
    "provider",
    "register",
    "tools_dropped",
    "unavailable_reason",
    "warm",
]

log = logging.getLogger("vaelii_llm.providers")

PROBE_TIMEOUT_S: Final = 5.0
"""The longest any backend's probe (``available``, ``unavailable_reason``) is
waited for before it counts as "no": past the built-ins' own probe deadlines,
so it only ever stops a registered one that would never return."""

_KIND: Final = re.compile(r"[a-z][a-z0-9_-]{0,31}")
"""What a registered kind is: a short word a variable, an option and a status
line can carry."""


def register(backend: Backend, *, replace: bool = False) -> None:
    """Make ``backend.kind`` name the backend its record describes, as the
    built-in kinds are described: selection, the vote pool and the command
    read the same record. Its options join the bag from now on.

    ``backend.module`` (imported when chosen) offers ``provider`` and ``async
    available`` (and ``generation_provider``, ``async warm`` and ``async
    unavailable_reason`` where it has them); each receives the options of
    ``backend.options`` its own signature takes. The kind is read as a configured
    one is (trimmed, lower case), and must then be a short word
    (:data:`_KIND`); ``stub`` is refused. A kind already registered, a
    built-in one included, is replaced only with ``replace=True``: a plug-in
    that silently took ``anthropic`` would be handed that backend's
    credential. Its probes are bounded (:data:`PROBE_TIMEOUT_S`) as the
    built-ins' are.
    """
    if not isinstance(backend, Backend):
        raise TypeError(f"register takes a providers.Backend, not {type(backend).__name__}")
    chosen_as = config.provider_kind(backend.kind)
    if not _KIND.fullmatch(chosen_as):
        shown = repr(chosen_as) if len(chosen_as) <= 40 else f"{len(chosen_as)} characters"
        raise ValueError(
            f"a provider kind is a lowercase letter, then up to 31 letters, digits, "
            f"'-' or '_'; got {shown}"
        )
    if chosen_as == STUB:
        raise ValueError("the kind 'stub' is the fallback every selection keeps; choose another")
    if chosen_as in REGISTRY and not replace:
        raise ValueError(
            f"the kind {chosen_as!r} is already registered; pass replace=True to replace it "
            "(it would receive what that backend is configured with, its credential included)"
        )
    if chosen_as != backend.kind:
        backend = msgspec.structs.replace(backend, kind=chosen_as)
    REGISTRY[chosen_as] = backend


def module_of(backend: Backend) -> ModuleType:
    """The module that implements ``backend`` (imported now, when not yet)."""
    return importlib.import_module(backend.module)


def hook(backend: Backend, name: Hook) -> Callable[..., Any] | None:
    """The function ``name`` of ``backend``'s module (imported now), or None
    where it offers none (:data:`~vaelii_llm._backends.Hook`)."""
    found: Callable[..., Any] | None = getattr(module_of(backend), name, None)
    return found


def _chosen(kind: str | None, opts: Iterable[str]) -> Backend:
    """The record of the kind to use, once the bag is checked against every
    registered kind's declared options (a misspelt option is the caller's bug,
    refused before any probe, not a reason to fall back)."""
    chosen = config.provider_kind(kind)
    if kind is None:  # a kind naming no backend is refused by its variable's name
        from vaelii_llm._switch_check import bad_kind

        why = bad_kind(chosen, config.PROVIDER.name)
        if why is not None:
            raise ValueError(why)
    backend = record(chosen)
    unknown = set(opts).difference({STUB}, *(known.names for known in REGISTRY.values()))
    if unknown:
        listed = ", ".join(repr(name) for name in sorted(unknown))
        raise TypeError(
            f"provider {chosen!r}: no registered backend takes the option(s) {listed}; "
            "the stub's own options go in stub={...}"
        )
    return backend


def _fallback(opts: Mapping[str, Any]) -> Provider:
    from vaelii_llm.providers import stub

    return handed_out(stub.provider(**dict(opts.get(STUB) or {})), STUB)


async def _probe(backend: Backend, module: ModuleType, opts: Mapping[str, Any]) -> bool:
    """What ``backend``'s probe says, False when it raised or passed
    :data:`PROBE_TIMEOUT_S`."""
    return await _refusal(backend, module, opts) is None


async def _refusal(backend: Backend, module: ModuleType, opts: Mapping[str, Any]) -> str | None:
    """None when ``backend``'s probe says yes; else why it did not when it
    passed :data:`PROBE_TIMEOUT_S` (so that is not waited for twice), or ``""``."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            said = bool(await module.available(**routed(backend, module.available, opts)))
    except TimeoutError:
        return _unanswered(backend)
    except Exception:
        return ""
    return None if said else ""


def _unanswered(backend: Backend) -> str:
    return f"{backend.kind}'s probe did not answer in {PROBE_TIMEOUT_S:g} s"


async def available(kind: str | None = None, **opts: Any) -> bool:
    """Whether the backend ``kind`` (default: the configured one) can answer now.

    Takes the bag of options (see the module docstring); the probe receives the
    ones it takes. Never raises for an unreachable backend; an unknown kind is
    a ValueError, an option no backend takes a TypeError.
    """
    backend = _chosen(kind, opts)
    return await _probe(backend, module_of(backend), opts)


async def unavailable_reason(kind: str | None = None, **opts: Any) -> str | None:
    """None when the backend ``kind`` (default: the configured one) can answer
    now, else one line saying why, where and what to do next: what a command
    prints when it would fall back to the stub.

    Asks the backend's own ``unavailable_reason`` (given what its probe takes)
    where it has one, else says only that its probe said no. The stub always
    answers. Takes the bag as :func:`available` does.
    """
    backend = _chosen(kind, opts)
    if backend.kind == STUB:
        return None
    return await _reason(backend, module_of(backend), opts)


async def _reason(backend: Backend, module: ModuleType, opts: Mapping[str, Any]) -> str | None:
    """The one place that says why ``backend`` cannot answer (None: it can)."""
    explain = getattr(module, "unavailable_reason", None)
    if explain is None:
        if await _probe(backend, module, opts):
            return None
        return f"{backend.kind} says it cannot answer now (its available() probe said no)"
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            reason: str | None = await explain(**routed(backend, explain, opts))
    except TimeoutError:
        return _unanswered(backend)
    except Exception as exc:  # a probe that raised is a probe that said no
        return f"{backend.kind}'s probe failed ({type(exc).__name__})"
    return reason


async def tools_dropped(kind: str | None = None) -> str | None:
    """Why the backend ``kind`` (default: the configured one) would answer a
    turn without the tools it was offered, in one line naming the fix (a
    local server whose chat template renders none says so at its ``/props``),
    else None: it would not, or cannot tell (a hosted API is trusted, the stub
    reads none). Never raises for a server that does not answer.

    The line a caller's own loop says once before its first turn, as
    ``vaelii-llm ask`` does: otherwise the model answers without the
    knowledge base and nothing says why.
    """
    check = hook(_chosen(kind, ()), "drops_tools")
    if check is None:
        return None
    said: str | None = await check()
    return said


async def active_kind(**opts: Any) -> str:
    """The kind :func:`provider` would hand back right now, for the same options."""
    backend = _chosen(None, opts)
    if backend.kind == STUB:
        return STUB
    return backend.kind if await _probe(backend, module_of(backend), opts) else STUB


async def _build(kind: str | None, constructor: str, opts: Mapping[str, Any]) -> Provider:
    backend = _chosen(kind, opts)
    if backend.kind == STUB:
        return _fallback(opts)
    module = module_of(backend)
    refused = await _refusal(backend, module, opts)
    if refused is not None:
        why = refused or await _reason(backend, module, opts) or "its probe said no"
        log.warning("provider %s cannot answer (%s); the stub answers instead", backend.kind, why)
        return _fallback(opts)
    build = getattr(module, constructor, module.provider)
    try:
        built: Provider = build(**routed(backend, build, opts))
    except Exception as exc:
        log.warning(
            "provider %s probed available but could not be built (%s); the stub answers instead",
            backend.kind,
            type(exc).__name__,
        )
        return _fallback(opts)
    return handed_out(built, backend.kind)


async def provider(kind: str | None = None, **opts: Any) -> Provider:
    """The backend ``kind`` (default: ``VAELII_LLM_PROVIDER``, else the stub),
    or the stub when it cannot answer.

    ``opts`` is one bag for every backend (the module docstring has the rule):
    the chosen backend's probe and constructor each receive the options
    their signatures take, the stub (chosen or a fallback) is built from
    ``opts["stub"]`` alone, and an option that no registered kind declares
    raises TypeError before anything is probed. So code that passes each
    backend what it needs works whichever kind the environment names.
    """
    return await _build(kind, "provider", opts)


async def generation_provider(kind: str | None = None, **opts: Any) -> Provider:
    """:func:`provider` for a generation turn: the backend's generation
    constructor where it has one (Ollama's runs the generation model)."""
    return await _build(kind, "generation_provider", opts)


async def warm(kind: str | None = None, **opts: Any) -> object:
    """The configured backend's warm-up, or None when it has none.

    Takes the same bag as :func:`provider`; the warm-up receives the options
    its signature takes. Raises the backend's typed error when the warm-up
    fails: a caller that asks for a resident model wants to know it is not there.
    """
    backend = _chosen(kind, opts)
    warm_up = getattr(module_of(backend), "warm", None)
    if warm_up is None:
        return None
    result: object = await warm_up(**routed(backend, warm_up, opts))
    return result


def __getattr__(name: str) -> ModuleType:
    """``providers.ollama`` and the like import the backend on first touch
    (found by its module's name: kind ``openai-responses`` is ``openai_responses``)."""
    module = f"{__name__}.{name}"
    if not any(backend.module == module for backend in REGISTRY.values()):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(module)
