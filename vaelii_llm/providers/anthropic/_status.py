"""What the command says of a Messages API host beyond its probe: the status
lines, and why a local server's chat template would drop the tools. Named by
the Messages API record (:data:`vaelii_llm._backends.BUILTIN`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from vaelii_llm import _backends
from vaelii_llm._transport.urls import hide_userinfo
from vaelii_llm.providers._props import no_tools_reason
from vaelii_llm.providers._props import served_models
from vaelii_llm.providers.anthropic._encode import DEFAULT_MODEL

__all__ = ["drops_tools", "status_lines"]


async def status_lines(ready: bool) -> AsyncIterator[str]:
    """The base URL (a ``user:password@`` cut) and the model a turn names;
    when the host answers and lists what it serves at ``/v1/models`` without a
    credential (a local server does; the hosted API asks for one), those too."""
    chosen = _backends.anthropic_model() or DEFAULT_MODEL
    yield f"base URL:   {hide_userinfo(_backends.anthropic_base_url())}"
    yield f"model:      {chosen}"
    if not ready:
        return
    served = await served_models(_backends.anthropic_base_url())
    if served is not None:
        yield f"served:     {', '.join(served) if served else '(none listed)'}"


async def drops_tools() -> str | None:
    """Why the configured host would drop the tools (a llama.cpp server whose
    template renders none says so at its ``/props``), or None: the hosted API
    has no ``/props`` and is trusted."""
    return await no_tools_reason(_backends.anthropic_base_url())
