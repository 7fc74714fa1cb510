"""Helpers for tests that reach a real model (marked ``llm``; none in this suite)."""

from __future__ import annotations

import pytest

from vaelii_llm import config
from vaelii_llm import errors


async def live_model(name: str, host: str | None = None) -> str:
    """Skip the calling test unless it may and can talk to Ollama model ``name``.

    Checks, in order, consent (``VAELII_LLM_LIVE``), reachability of the host,
    and whether the host has the model; the skip names the first that fails.
    Returns the normalized base URL of the host when all three hold.
    """
    if not config.live_llm():
        pytest.skip("needs VAELII_LLM_LIVE=1: the consent to call a real model")
    from vaelii_llm.providers import ollama

    base = ollama.base_url(host)
    if not await ollama.available(host=base):
        pytest.skip(f"no Ollama answers at {base}")
    try:
        await ollama.capabilities(name, host=base)
    except errors.LLMError as exc:
        pytest.skip(f"Ollama at {base} does not have {name!r} ({exc.type})")
    return base
