"""A bearer key (``Authorization: Bearer <key>``): trimmed, checked, never shown.

The OpenAI-compatible servers' key (:mod:`vaelii_llm.providers.openai._key`)
and a hosted Ollama's (``OLLAMA_API_KEY``) travel the same way. A key is
trimmed (a ``.env`` file's CRLF, a ``$(cat key)``'s newline) and checked
once, when it is read: a control character left in it is refused as
:class:`~vaelii_llm.errors.LLMBadCredential` naming the ``Authorization``
header, never the value. It travels in that header and nowhere else: no
message, log line, repr or span holds it (the transport withholds every
credential a request sent from every error).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from vaelii_llm._transport.settings import Secret
from vaelii_llm._transport.settings import checked_headers
from vaelii_llm._transport.settings import with_json_content_type

__all__ = ["HEADER", "BearerKey", "session_headers"]

HEADER: Final = "Authorization"
"""The header a key travels in, as ``Bearer <key>``."""


class BearerKey(Secret):
    """A checked key and where it came from (``source``: ``"explicit"`` or
    the variable it was read from); its repr withholds the value."""

    __slots__ = ("source", "value")
    shown = ("source",)

    source: str

    def __init__(self, value: str, source: str) -> None:
        self._hold(value=value.strip(), source=source)
        checked_headers(self.headers())  # LLMBadCredential naming the header

    def headers(self) -> dict[str, str]:
        """The authentication header."""
        return {HEADER: f"Bearer {self.value}"}


def session_headers(key: BearerKey | None, headers: Mapping[str, str] | None) -> dict[str, str]:
    """The headers of every request: the key's ``Authorization``, then the
    caller's own (which win), and ``Content-Type`` unless they name one."""
    out = dict(key.headers() if key is not None else {})
    for name, value in (headers or {}).items():
        for held in [held for held in out if held.lower() == name.lower()]:
            del out[held]
        out[name] = value
    return with_json_content_type(out)
