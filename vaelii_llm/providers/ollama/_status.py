"""What the command says of an Ollama beyond its probe: the status lines, why
the configured model cannot take the tools, and a pool host lacking the model.

Named by the Ollama record (:data:`vaelii_llm._backends.BUILTIN`), so the
command holds no Ollama of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from vaelii_llm import _backends
from vaelii_llm import errors
from vaelii_llm.providers.ollama._chat import base_url
from vaelii_llm.providers.ollama._probes import capabilities
from vaelii_llm.providers.ollama._probes import context_length

__all__ = ["TOOL_MODELS", "cannot_call_tools", "missing", "missing_model", "status_lines"]

TOOL_MODELS = "llama3.2, qwen3 or mistral-nemo"
"""Ollama models that call tools, named when the configured one cannot."""


def missing(exc: errors.LLMApiError, model: str, host: str | None = None) -> str | None:
    """The next step when the host (default: the configured one) has no
    ``model`` (its 404), else None."""
    if exc.status != 404:
        return None
    return (
        f"the Ollama at {base_url(host)} has no model {model!r}: run `ollama pull {model}` "
        "there, or set VAELII_OLLAMA_MODEL to one it has (`ollama list`)"
    )


async def status_lines(ready: bool) -> AsyncIterator[str]:
    """The host and the model; when it answers, what the model can do."""
    model = _backends.ollama_model()
    yield f"host:       {base_url()}"
    yield f"model:      {model}"
    if not ready:
        return
    try:
        caps = sorted(await capabilities(model))
    except errors.LLMApiError as exc:
        yield f"missing:    {missing(exc, model) or f'{exc.type}: {exc}'}"
        return
    yield f"capabilities: {', '.join(caps)}"
    yield f"tools:      {'yes' if 'tools' in caps else 'no'}"
    yield f"context:    {await context_length(model)}"


async def cannot_call_tools() -> str | None:
    """Why the configured Ollama model cannot run the tool loop, or None."""
    model = _backends.ollama_model()
    try:
        caps = await capabilities(model)
    except errors.LLMApiError as exc:
        found = missing(exc, model)
        if found is None:
            raise
        return found
    if "tools" in caps:
        return None
    return (
        f"the Ollama model {model} cannot call tools (it can: {', '.join(sorted(caps))}); "
        f"set VAELII_OLLAMA_MODEL to one that can, e.g. {TOOL_MODELS} (`ollama pull llama3.2`)"
    )


async def missing_model(host: str) -> str | None:
    """Why a pool host that answers its probe cannot answer a turn of the
    configured model: the model is not there, or its show failed; else None."""
    model = _backends.ollama_model()
    try:
        await capabilities(model, host)
    except errors.LLMApiError as exc:
        return missing(exc, model, host) or f"{exc.type}: {exc}"
    return None
