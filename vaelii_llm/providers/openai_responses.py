"""The OpenAI Responses API backend (``POST {base}/responses``): OpenAI's own
API, and the servers that speak it (vLLM, Ollama, LM Studio, llama.cpp's
``llama-server``).

Kind ``openai-responses``: the same server as the Chat Completions backend
(:mod:`vaelii_llm.providers.openai`) on another path, so it reads that
backend's switches (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``VAELII_OPENAI_MODEL``, ``VAELII_OPENAI_HOSTS``) and shares its key, its
probe (:func:`available`: ``GET {base}/models``) and its status lines.

It is stateless: each turn sends ``store: false`` (unless built with
``store=True``) and the caller's messages as the whole history, never a
``previous_response_id``; a reasoning model's encrypted reasoning is carried
back in those messages. ``count_tokens`` asks
``/responses/input_tokens``. How a request maps to the wire is told in
:mod:`~vaelii_llm.providers.openai._responses_request`, the answer and the
stream in :mod:`~vaelii_llm.providers.openai._responses_assemble`; the
session, turn and pump are the shared skeleton's.
"""

from __future__ import annotations

from vaelii_llm._backends import openai_base_url as default_host
from vaelii_llm._base_url import normalize_base_url as read_host
from vaelii_llm.providers.openai import OpenAIResponsesProvider
from vaelii_llm.providers.openai import available
from vaelii_llm.providers.openai import drops_tools
from vaelii_llm.providers.openai import models
from vaelii_llm.providers.openai import responses_provider as provider
from vaelii_llm.providers.openai import status_lines
from vaelii_llm.providers.openai import unavailable_reason

_HOOKS = (default_host, read_host, drops_tools, status_lines)
"""What the pool and the command find here by name (:data:`vaelii_llm._backends.Hook`)."""

OpenAIResponsesProvider.__module__ = __name__  # where a user finds it

__all__ = ["OpenAIResponsesProvider", "available", "models", "provider", "unavailable_reason"]
