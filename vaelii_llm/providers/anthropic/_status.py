"""What the command says of a Messages API host beyond its probe: the status
lines. Named by the Messages API record (:data:`vaelii_llm._backends.BUILTIN`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from vaelii_llm import config
from vaelii_llm.providers.anthropic._encode import DEFAULT_MODEL

__all__ = ["status_lines"]


async def status_lines(ready: bool) -> AsyncIterator[str]:
    """The base URL (a ``user:password@`` cut) and the model a turn names,
    whether or not the host answers."""
    yield f"base URL:   {config.hide_userinfo(config.anthropic_base_url())}"
    yield f"model:      {DEFAULT_MODEL}"
