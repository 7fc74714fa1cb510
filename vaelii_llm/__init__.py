"""vaelii_llm: an asyncio-first SDK for talking to a model and letting it read a KB.

The request and response types are here; the rest lives in submodules that load
on first use, so ``import vaelii_llm`` imports no HTTP library and no backend:

- ``agent``: the tool loop over a provider and a toolset, written once
- ``providers``: choosing a backend (the stub, Ollama, the Messages API, the
  OpenAI-compatible wire)
- ``pool``: a majority yes/no vote over a pool of model hosts
- ``tools``: the model's read-only tool surface over a knowledge base
- ``kb``: the embedded knowledge-base engine
- ``engine``: the boundary through which the tools reach an engine
- ``errors``: the typed refusals
- ``config``: every switch the package reads from the environment
"""

from __future__ import annotations

import sys

if sys.version_info < (3, 11):  # noqa: UP036 - said in words before a 3.11 module fails to load
    raise ImportError(
        "vaelii-llm needs Python 3.11 or newer; this is Python "
        + ".".join(str(part) for part in sys.version_info[:3])
    )

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from vaelii_llm._protocol import (
    Block,
    Cache,
    Delta,
    DocumentBlock,
    ImageBlock,
    Message,
    OpaqueBlock,
    Provider,
    ProviderBase,
    RedactedThinkingBlock,
    Request,
    Response,
    StopReason,
    StreamItem,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolInputDelta,
    ToolResultBlock,
    ToolSchema,
    ToolUseBlock,
    ToolUseStart,
    Usage,
)
from vaelii_llm._version import __version__

if TYPE_CHECKING:
    from vaelii_llm import agent, config, engine, errors, kb, pool, providers, tools

__all__ = [
    "Block",
    "Cache",
    "Delta",
    "DocumentBlock",
    "ImageBlock",
    "Message",
    "OpaqueBlock",
    "Provider",
    "ProviderBase",
    "RedactedThinkingBlock",
    "Request",
    "Response",
    "StopReason",
    "StreamItem",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "ThinkingDelta",
    "ToolInputDelta",
    "ToolResultBlock",
    "ToolSchema",
    "ToolUseBlock",
    "ToolUseStart",
    "Usage",
    "__version__",
    "agent",
    "config",
    "engine",
    "errors",
    "kb",
    "pool",
    "providers",
    "tools",
]

_LAZY = frozenset({"agent", "config", "engine", "errors", "kb", "pool", "providers", "tools"})


def __getattr__(name: str) -> ModuleType:
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
