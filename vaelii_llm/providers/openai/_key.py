"""The OpenAI-compatible API key: optional, and a :class:`~vaelii_llm.providers._bearer.BearerKey`.

A local server (vLLM without ``--api-key``, llama.cpp's server, LM Studio)
needs no key, so none is no error: the requests carry no ``Authorization``.
A key, explicit or ``OPENAI_API_KEY``, is trimmed and checked once, when the
provider is built, and shown nowhere (:mod:`vaelii_llm.providers._bearer`).
"""

from __future__ import annotations

from vaelii_llm import _backends
from vaelii_llm.providers._bearer import HEADER
from vaelii_llm.providers._bearer import BearerKey

__all__ = ["HEADER", "APIKey"]


class APIKey(BearerKey):
    """A checked key and where it came from; its repr withholds the value."""

    __slots__ = ()

    @classmethod
    def of(cls, explicit: str | None = None) -> APIKey | None:
        """The key to send: ``explicit`` (a blank one is none), else
        ``OPENAI_API_KEY``; None when there is none."""
        if explicit is not None:
            trimmed = explicit.strip()
            return cls(trimmed, "explicit") if trimmed else None
        found = _backends.openai_api_key()
        return cls(found, "OPENAI_API_KEY") if found is not None else None
