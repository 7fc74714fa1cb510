"""The OpenAI-compatible backend: the Chat Completions wire (vLLM, llama.cpp's
server, LM Studio, SGLang, TGI, Ollama's ``/v1``, OpenAI).

:func:`provider` builds an :class:`OpenAIProvider` on one base URL and model
(no I/O). The key is optional (a local server needs none): when given, or set
as ``OPENAI_API_KEY``, it is sent as ``Authorization: Bearer`` and shown
nowhere. :func:`available` asks ``GET {base}/models`` under
:data:`~vaelii_llm.providers.openai._probes.MODELS_TIMEOUT_MS`; :func:`models`
lists what the server serves.

How a request and an answer map to the wire is told where each is done: the
request and the codec in :mod:`~vaelii_llm.providers.openai._chat`, the
answer and the stream's reassembly (``stream`` returns the Response
``complete`` does) in :mod:`~vaelii_llm.providers.openai._assemble`. There
is no retry: a 429 is an ``LLMApiError`` carrying its status. The session,
the closed state, the turn and the stream pump are the shared skeleton's
(:mod:`vaelii_llm.providers._http`).
"""

from __future__ import annotations

from vaelii_llm._backends import openai_base_url as default_host
from vaelii_llm._base_url import normalize_base_url as read_host
from vaelii_llm.providers.openai import _responses_provider
from vaelii_llm.providers.openai._probes import available
from vaelii_llm.providers.openai._probes import models
from vaelii_llm.providers.openai._probes import unavailable_reason
from vaelii_llm.providers.openai._provider import OpenAIProvider
from vaelii_llm.providers.openai._provider import provider
from vaelii_llm.providers.openai._status import drops_tools as drops_tools
from vaelii_llm.providers.openai._status import status_lines as status_lines

_HOOKS = (default_host, read_host, drops_tools, status_lines)
"""What the pool and the command find here by name (:data:`vaelii_llm._backends.Hook`)."""
OpenAIResponsesProvider = _responses_provider.OpenAIResponsesProvider
responses_provider = _responses_provider.provider
"""The Responses API's backend, beside this one: :mod:`vaelii_llm.providers.openai_responses`
offers it under its own names."""

OpenAIProvider.__module__ = __name__  # where a user finds it, as trio names its classes

__all__ = ["OpenAIProvider", "available", "models", "provider", "unavailable_reason"]
