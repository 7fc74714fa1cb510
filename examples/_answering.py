"""The one line every example that asks a model prints first: which backend answers.

Each example imports :func:`who_answers` from here (``python examples/NAME.py``
puts this directory on the import path), so a new user learns at once whether a
real model answered or the scripted stub did, and why: the reason is
:func:`vaelii_llm.providers.unavailable_reason`'s, the one place that words it
for every registered kind.
"""

from __future__ import annotations

import os

from vaelii_llm import Provider, config, providers
from vaelii_llm.providers.stub import StubProvider


async def who_answers(model: Provider) -> str:
    """One line: the configured backend, or the stub and why no model answers."""
    if not isinstance(model, StubProvider):
        return f"answering: {config.provider_kind()}, a real model"
    why = await providers.unavailable_reason()
    if why is not None:
        return f"answering: the scripted stub, not a model ({why})"
    if os.environ.get("VAELII_LLM_PROVIDER", "").strip():  # the stub, named
        return "answering: the scripted stub, not a model (named as the provider)"
    # the stub by default: the kinds and their switches are the command's to list
    return (
        "answering: the scripted stub, not a model (nothing is configured); "
        "`vaelii-llm status` says what to set"
    )
