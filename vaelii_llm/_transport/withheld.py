"""Withholding: the credentials a request sent, kept out of every error.

Credentials. Every typed error leaves the boundary (and a backend's own
failures leave its turn, :func:`withhold`) with the credentials its request
sent withheld: every header value but the few that are no secret
(:data:`_SHOWN_HEADERS`), an ``Authorization``'s token and a Basic token's
password, the URL's and the proxy's user info, each also as JSON, repr and
percent encoding would show it, become ``<NAME withheld>`` in the message,
every text attribute (``body``, ``text``, ``excerpt``, ``reason``) and every
exception chained to it; a cut one's opening too. aiohttp's causes keep
their type, but their record of the request holds header names without
values and URLs without user info. A far end echoing the key therefore
shows nowhere: not in ``str``, ``repr``, a traceback, a log line or a span.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Final
from typing import NamedTuple
from urllib.parse import quote
from urllib.parse import quote_plus
from urllib.parse import unquote

import aiohttp
import msgspec
from aiohttp.client_reqrep import ConnectionKey
from multidict import CIMultiDict
from multidict import CIMultiDictProxy
from yarl import URL

from vaelii_llm._transport.aiohttp_private import connection_key
from vaelii_llm._transport.aiohttp_private import replace_connection_key
from vaelii_llm._transport.aiohttp_private import session_proxy
from vaelii_llm._transport.urls import userinfo

__all__ = ["sent_rule", "withhold"]

_SHOWN_HEADERS: Final = frozenset(
    {
        "accept",
        "accept-encoding",
        "anthropic-beta",
        "anthropic-version",
        "connection",
        "content-length",
        "content-type",
        "host",
        "user-agent",
    }
)
"""The headers whose values are no secret. Every other value a request sends
(``x-api-key``, ``Authorization``, a gateway's own header) is a credential."""

_MIN_SECRET: Final = 4
"""A value shorter than this is not searched for: it would match ordinary text
everywhere and guards nothing."""

_CUTS: Final = ("…", "...")
"""What marks a cut: an excerpt's ``…``, and the ``...`` a parser's repr of a
long value puts between its opening and its end (pydantic's ``input_value``)."""

_SEARCHED_CUTS: Final = 64
"""How many cuts of one text are searched for a secret's opening before them
and its ending after them (a body of a million ``...`` costs no more than
one of a few)."""


class _SentTo(NamedTuple):
    """What one request sent that may carry a credential, kept for its failure."""

    session: aiohttp.ClientSession
    headers: Mapping[str, str] | None
    url: str | URL


class _Withheld:
    """The credentials one request sent, and the one rule keeping them out of
    every text that came back from the far end.

    Each secret (a header value, an ``Authorization``'s token, a Basic
    token's ``user:password`` and password, the URL's password, and each of
    those JSON-, repr- and percent-encoded) is replaced by ``<NAME withheld>``
    wherever it occurs; an opening of one (four characters or more) left by
    a cut, at a text's end or before a cut (:data:`_CUTS`), and an ending of
    one after a cut, are replaced too.
    """

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Mapping[str, str]) -> None:
        # the longest first, so a value is replaced before a part of it
        self._secrets = sorted(secrets.items(), key=lambda item: -len(item[0]))

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def text(self, text: str) -> str:
        """``text`` with every secret, whole or cut, withheld."""
        for value, name in self._secrets:
            if value in text:
                text = text.replace(value, f"<{name} withheld>")
        cuts = _cuts(text)
        for start in sorted((at + len(cut) for at, cut in cuts), reverse=True):
            text = self._cut_ending(text, start)  # from the back: earlier cuts stay put
        for end in sorted([len(text)] + [at for at, _ in _cuts(text)], reverse=True):
            text = self._cut_opening(text, end)
        return text

    def _cut_ending(self, text: str, start: int) -> str:
        """``text`` with a secret's ending (four characters or more) that
        begins at ``start`` withheld."""
        lead = text[start : start + _MIN_SECRET]
        for value, name in self._secrets:
            if len(lead) < _MIN_SECRET or lead not in value:
                continue
            for size in range(min(len(value) - 1, len(text) - start), _MIN_SECRET - 1, -1):
                if value.endswith(text[start : start + size]):
                    return f"{text[:start]}<{name} withheld>{text[start + size :]}"
        return text

    def _cut_opening(self, text: str, end: int) -> str:
        """``text`` with a secret's opening that ends at ``end`` withheld."""
        for value, name in self._secrets:
            start = max(0, end - len(value) + 1)
            lead = value[:_MIN_SECRET]
            at = text.find(lead, start, end)
            while at != -1:
                if value.startswith(text[at:end]):
                    return f"{text[:at]}<{name} withheld>{text[end:]}"
                at = text.find(lead, at + 1, end)
        return text

    def error(self, exc: BaseException) -> None:
        """``exc`` and every exception chained to it (cause and context),
        rewritten in place: their arguments and text attributes withheld, and
        aiohttp's record of the request (its headers, the URL's user info,
        the proxy's credentials) replaced by one that holds no value."""
        seen: set[int] = set()
        todo: list[BaseException | None] = [exc]
        while todo:
            one = todo.pop()
            if one is None or id(one) in seen:
                continue
            seen.add(id(one))
            self._one(one)
            todo += (one.__cause__, one.__context__)

    def _one(self, exc: BaseException) -> None:
        if isinstance(exc, aiohttp.ClientResponseError):
            exc.request_info = _safe_request_info(exc.request_info)
            if exc.headers is not None:  # the far end's, which may echo ours
                exc.headers = CIMultiDictProxy(
                    CIMultiDict((name, self.text(value)) for name, value in exc.headers.items())
                )
        key = connection_key(exc)
        if key is not None:
            replace_connection_key(
                exc,
                key._replace(
                    proxy=None if key.proxy is None else key.proxy.with_user(None),
                    proxy_auth=None,
                ),
            )
        exc.args = tuple(self._arg(arg) for arg in exc.args)
        shown = getattr(exc, "__dict__", None)
        if shown:
            for name, value in list(shown.items()):
                if isinstance(value, str):
                    shown[name] = self.text(value)
                elif type(value) is dict and value:  # a far end's headers (LLMApiError's)
                    shown[name] = {
                        key: self.text(item) if isinstance(item, str) else item
                        for key, item in value.items()
                    }

    def _arg(self, arg: object) -> object:
        if isinstance(arg, str):
            return self.text(arg)
        if isinstance(arg, aiohttp.RequestInfo):
            return _safe_request_info(arg)
        if isinstance(arg, ConnectionKey):
            return arg._replace(
                proxy=None if arg.proxy is None else arg.proxy.with_user(None), proxy_auth=None
            )
        return arg


def _cuts(text: str) -> list[tuple[int, str]]:
    """Where ``text`` was cut (:data:`_CUTS`), the first :data:`_SEARCHED_CUTS`."""
    found: list[tuple[int, str]] = []
    for cut in _CUTS:
        at = text.find(cut)
        while at != -1 and len(found) < _SEARCHED_CUTS:
            found.append((at, cut))
            at = text.find(cut, at + len(cut))
    return found


def _safe_request_info(info: aiohttp.RequestInfo) -> aiohttp.RequestInfo:
    """aiohttp's record of a request with its URLs' user info cut and every
    header value but the shown ones withheld (the names stay)."""
    headers = CIMultiDict(
        (name, value if name.lower() in _SHOWN_HEADERS else "<withheld>")
        for name, value in info.headers.items()
    )
    return aiohttp.RequestInfo(
        info.url.with_user(None),
        info.method,
        CIMultiDictProxy(headers),
        info.real_url.with_user(None),
    )


def _encodings(value: str) -> set[str]:
    """``value`` and the forms a far end would echo it in (JSON, repr, a URL)."""
    encoded = msgspec.json.encode(value).decode()[1:-1]
    escaped = value.replace("\\", "\\\\")
    return {
        value,
        encoded,
        json.dumps(value)[1:-1],
        repr(value)[1:-1],
        escaped.replace("'", "\\'"),
        escaped.replace('"', '\\"'),
        quote(value, safe=""),
        quote_plus(value, safe=""),
    }


def _header_secrets(value: str) -> list[str]:
    """A header value's secrets: itself, its scheme's token (``Bearer``,
    ``Basic``…), and a Basic token's ``user:password`` and password."""
    found = [value]
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if token:
        found.append(token)
        if scheme.lower() == "basic":
            found += _basic_parts(token)
    return found


def _basic_parts(token: str) -> list[str]:
    """A Basic token's ``user:password`` and password (none if it will not decode)."""
    try:
        pair = base64.b64decode(token, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return []
    return [pair, pair.partition(":")[2]]


def _withheld(
    headers: Iterable[Mapping[str, str] | None],
    urls: Iterable[str | URL | None],
    auths: Iterable[aiohttp.BasicAuth | None] = (),
) -> _Withheld:
    """The rule for a request that sent ``headers`` to ``urls`` (with ``auths``)."""
    found: dict[str, str] = {}

    def add(value: str, name: str) -> None:
        for form in _encodings(value.strip()):
            if len(form) >= _MIN_SECRET:
                found.setdefault(form, name)

    def add_basic(login: str, password: str, name: str) -> None:
        pair = f"{login}:{password}"
        add(password, name)
        add(pair, name)
        add(base64.b64encode(pair.encode()).decode(), name)

    for mapping in headers:
        for name, value in (mapping or {}).items():
            if name.lower() not in _SHOWN_HEADERS:
                for secret in _header_secrets(value):
                    add(secret, name)
    for url in urls:
        # Read by the rule that cuts it from displays, not by yarl: a password
        # holding an unencoded '#', '/' or '?' is one yarl reads otherwise.
        info = None if url is None else userinfo(str(url))
        if info:
            user, _, password = info.partition(":")
            if password:
                add_basic(unquote(user), unquote(password), "password")
                add(password, "password")
    for auth in auths:
        if auth is not None and auth.password:
            add_basic(auth.login, auth.password, "password")
    return _Withheld(found)


def sent_rule(
    session: aiohttp.ClientSession, headers: Mapping[str, str] | None, url: str
) -> Callable[[str], str]:
    """What withholds, in a text, every credential a request sent (``headers``
    and ``session``'s own, the user info of ``url`` and of the session's proxy,
    the session's ``auth``): for what a far end hands back outside an error
    (the headers of a 200)."""
    return _sent(session, headers, url).text


def _sent(session: aiohttp.ClientSession, headers: Mapping[str, str] | None, url: str) -> _Withheld:
    proxy, proxy_auth = session_proxy(session)
    return _withheld((session.headers, headers), (url, proxy), (session.auth, proxy_auth))


def withhold(
    exc: BaseException, session: aiohttp.ClientSession, headers: Mapping[str, str] | None, url: str
) -> None:
    """Withhold, in ``exc`` and its chain (in place), every credential a
    request sent: ``headers`` and ``session``'s own, the user info of ``url``
    and of the session's proxy, the session's ``auth``. A failure built from
    far-end text (a body, an excerpt, an error event) goes through here
    before it is raised: for the transport's own requests :class:`_Boundary`
    does it; a backend does it for what its codec raises from a body."""
    _sent(session, headers, url).error(exc)
