"""The OpenAI-compatible API key: optional, trimmed, checked, never shown.

A local server (vLLM without ``--api-key``, llama.cpp's server, LM Studio)
needs no key, so none is no error: the requests carry no ``Authorization``.
A key, explicit or ``OPENAI_API_KEY``, is trimmed (a ``.env`` file's CRLF, a
``$(cat key)``'s newline) and checked once, when the provider is built: a
control character left in it is refused as
:class:`~vaelii_llm.errors.LLMBadCredential` naming the ``Authorization``
header, never the value. It travels in that header and nowhere else: no
message, log line, repr or span holds it.
"""

from __future__ import annotations

from typing import Final

from vaelii_llm import _backends
from vaelii_llm._transport.settings import Secret
from vaelii_llm._transport.settings import checked_headers

__all__ = ["HEADER", "APIKey"]

HEADER: Final = "Authorization"
"""The header the key travels in, as ``Bearer <key>``."""


class APIKey(Secret):
    """A checked key and where it came from; its repr withholds the value."""

    __slots__ = ("source", "value")
    shown = ("source",)

    source: str

    def __init__(self, value: str, source: str) -> None:
        self._hold(value=value.strip(), source=source)
        checked_headers(self.headers())  # LLMBadCredential naming the header

    @classmethod
    def of(cls, explicit: str | None = None) -> APIKey | None:
        """The key to send: ``explicit`` (a blank one is none), else
        ``OPENAI_API_KEY``; None when there is none."""
        if explicit is not None:
            trimmed = explicit.strip()
            return cls(trimmed, "explicit") if trimmed else None
        found = _backends.openai_api_key()
        return cls(found, "OPENAI_API_KEY") if found is not None else None

    def headers(self) -> dict[str, str]:
        """The authentication header."""
        return {HEADER: f"Bearer {self.value}"}
