"""What both OpenAI-compatible wires (Chat Completions, Responses) read from a
provider's options, once: one server, two paths.

:class:`ServerCodec` is the base of both wires' codecs; the probes send the
same headers by the same rule (:func:`~vaelii_llm.providers._bearer.session_headers`).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Mapping
from typing import Any

from vaelii_llm import _backends
from vaelii_llm._base_url import BaseURL
from vaelii_llm._base_url import api_base
from vaelii_llm._transport.settings import Endpoint
from vaelii_llm._transport.urls import userinfo
from vaelii_llm.providers._bearer import session_headers
from vaelii_llm.providers._http import SessionHeadersOnly
from vaelii_llm.providers.openai._key import APIKey

__all__ = ["ServerCodec", "refuse_two_authorizations"]


class ServerCodec(SessionHeadersOnly):
    """What a wire's codec resolves from its options before its own: the base
    URL (and as shown, a password cut), the model, where a turn is POSTed
    (``path`` below the base URL), how the far end is named (``endpoint``)
    and the session's headers. An option not in ``known`` is a TypeError
    naming the ``wire``, as a keyword signature refuses it."""

    def __init__(
        self,
        options: Mapping[str, Any],
        known: Collection[str],
        wire: str,
        path: str,
        endpoint: Callable[[BaseURL], Endpoint],
    ) -> None:
        unknown = options.keys() - known
        if unknown:
            raise TypeError(f"unexpected {wire} option(s): {', '.join(sorted(unknown))}")
        self.base = api_base(_backends.openai_base_url(options.get("base_url")))
        self.base_url = self.base.url
        self.model = _backends.openai_model(options.get("model"))
        self.shown_url = self.base.shown
        self.endpoint = endpoint(self.base)
        self.url = self.base.at(path)
        key = APIKey.of(options.get("api_key"))
        named_by = "base_url" if options.get("base_url") else "OPENAI_BASE_URL"
        refuse_two_authorizations(self.base_url, named_by, key, options.get("headers"))
        self._headers = session_headers(key, options.get("headers"))


def refuse_two_authorizations(
    base_url: str, named_by: str, key: APIKey | None, headers: Mapping[str, str] | None
) -> None:
    """A base URL carrying ``user:password@`` is sent as a Basic
    ``Authorization``; a key (or a caller's own ``Authorization`` header) is
    one too, and a request carries one. The conflict is the configuration's,
    refused (ValueError naming both, quoting neither) before any I/O, not
    reported later as the far end unreachable. ``named_by``: where the URL came from."""
    if not userinfo(base_url):
        return
    other = None if key is None else ("api_key" if key.source == "explicit" else key.source)
    if other is None and any(name.lower() == "authorization" for name in headers or {}):
        other = "the Authorization header in headers"
    if other is not None:
        raise ValueError(
            f"{named_by} carries a user:password@ and {other} is set: both are sent as the "
            f"Authorization header, and a request carries one; drop one of them"
        )
