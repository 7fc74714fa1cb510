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

:func:`answer` (loaded on first use too) asks for an answer that is a value of
a type (a msgspec Struct, a TypedDict, a dataclass or a pydantic model),
asking again when it does not fit.
"""

from __future__ import annotations

import sys

if sys.version_info < (3, 11):  # noqa: UP036 - said in words before a 3.11 module fails to load
    raise ImportError(
        "vaelii-llm needs Python 3.11 or newer; this is Python "
        + ".".join(str(part) for part in sys.version_info[:3])
    )

import importlib
from typing import TYPE_CHECKING
from typing import Any

from vaelii_llm._protocol import Block
from vaelii_llm._protocol import Cache
from vaelii_llm._protocol import Delta
from vaelii_llm._protocol import DocumentBlock
from vaelii_llm._protocol import ImageBlock
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import OpaqueBlock
from vaelii_llm._protocol import Provider
from vaelii_llm._protocol import ProviderBase
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StopReason
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ThinkingDelta
from vaelii_llm._protocol import ToolInputDelta
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm._protocol import Usage
from vaelii_llm._version import __version__

if TYPE_CHECKING:
    from vaelii_llm import agent
    from vaelii_llm import config
    from vaelii_llm import engine
    from vaelii_llm import errors
    from vaelii_llm import kb
    from vaelii_llm import pool
    from vaelii_llm import providers
    from vaelii_llm import tools
    from vaelii_llm._answers import answer

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
    "answer",
    "config",
    "engine",
    "errors",
    "kb",
    "pool",
    "providers",
    "tools",
]

_LAZY = frozenset({"agent", "config", "engine", "errors", "kb", "pool", "providers", "tools"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "answer":  # loaded on first use, as the modules are
        return importlib.import_module(f"{__name__}._answers").answer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
