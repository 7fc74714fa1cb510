"""What the command says of an OpenAI-compatible server beyond its probe: the
status lines, and why its chat template would drop the tools. Named by the
OpenAI record (:data:`vaelii_llm._backends.BUILTIN`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from vaelii_llm import _backends
from vaelii_llm._base_url import DEFAULT_OPENAI_PATH
from vaelii_llm._transport.urls import hide_userinfo
from vaelii_llm.providers._props import no_tools_reason
from vaelii_llm.providers.openai._probes import models

__all__ = ["drops_tools", "status_lines"]


async def status_lines(ready: bool) -> AsyncIterator[str]:
    """The base URL and the model; when it answers, the models it serves."""
    chosen = _backends.openai_model()
    yield f"base URL:   {hide_userinfo(_backends.openai_base_url())}"
    yield f"model:      {chosen or '(none sent: the server chooses)'}"
    if not ready:
        return
    served = await models()
    yield f"served:     {', '.join(served) if served else '(none listed)'}"
    if chosen is not None and chosen not in served:
        yield f"warning:    {chosen!r} is not among the served models"


async def drops_tools() -> str | None:
    """Why the configured server would drop the tools (a llama.cpp server whose
    template renders none says so at its ``/props``, beside its ``/v1``), or None."""
    return await no_tools_reason(_backends.openai_base_url().removesuffix(DEFAULT_OPENAI_PATH))
