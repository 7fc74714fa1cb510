"""The embedded knowledge-base engine: a small, real, in-memory engine.

Sentences are EDN lists such as ``(isa Muffet Spider)``, each stored as a *sentex*
with an integer handle in a *context*; contexts inherit from their parents through
``(genlCtx Child Parent)``; rules are ``(implies (and a b ...) c)``; variables start
with ``?``. The op table (`vaelii_llm.kb._ops.OPS`) is what `vaelii_llm.engine`
describes to the tools.

This package knows nothing of models: it imports no provider, tool or transport.
"""

from __future__ import annotations

from vaelii_llm.kb._io import load_edn, open, sample, save, synthetic
from vaelii_llm.kb._store import KB, Subscription
from vaelii_llm.kb._types import (
    Answer,
    Change,
    Context,
    ContextInfo,
    Cut,
    EngineRefusal,
    Handle,
    Opts,
    Problem,
    Sentence,
    Sentex,
    Term,
    WhyNot,
)

__all__ = [
    "KB",
    "Answer",
    "Change",
    "Context",
    "ContextInfo",
    "Cut",
    "EngineRefusal",
    "Handle",
    "Opts",
    "Problem",
    "Sentence",
    "Sentex",
    "Subscription",
    "Term",
    "WhyNot",
    "load_edn",
    "open",
    "sample",
    "save",
    "synthetic",
]
