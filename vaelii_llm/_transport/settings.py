"""What a request names and carries: the far end, the turn's deadline, its
headers (checked), and the network settings a provider's sessions are made with."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import ssl as _ssl
import sys
import urllib.request
from collections.abc import Callable
from collections.abc import Mapping
from typing import ClassVar
from typing import Final
from unicodedata import category

import aiohttp
import msgspec
from multidict import CIMultiDict
from multidict import CIMultiDictProxy
from yarl import URL

from vaelii_llm._transport.urls import hide_userinfo
from vaelii_llm._version import __version__
from vaelii_llm.errors import LLMBadCredential

__all__ = [
    "CONNECT_TIMEOUT_MS",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_NETWORK",
    "USER_AGENT",
    "Deadline",
    "Endpoint",
    "Network",
    "SSLOption",
    "Secret",
    "checked_headers",
    "env_proxy",
    "with_json_content_type",
]

CONNECT_TIMEOUT_MS: Final = 5_000
"""How long obtaining a connection may take (DNS, TCP, TLS), whatever the turn allows."""

DEFAULT_MAX_CONNECTIONS: Final = 100
"""Connections a provider keeps open to its far end, per event loop, when
``max_connections`` is unset: aiohttp's own default pool, chosen by
measurement (``tests/bench/bench_concurrency.py --sweep``). Unbounded, every
one of many turns at once opens its own connection: a burst of a few
thousand streams costs more time and memory per turn than queueing for a
reused few, and on a loaded machine some of its connects do not land inside
:data:`CONNECT_TIMEOUT_MS` at all. Bounds from a few dozen to a few hundred
measure alike, so the one a plain aiohttp client has is kept: a provider then
costs what that client costs. Raise it (``0``: no bound) when turns end in
:class:`LLMTimeout` with phase ``connection``."""

USER_AGENT: Final = "vaelii-llm/{} Python/{}.{}.{}".format(__version__, *sys.version_info[:3])
"""Sent on every request of every session (turns and probes), so the far end
can tell which client spoke; a caller's own ``User-Agent`` header wins."""

_BAD_HEADER_CHARS: Final = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
"""What no header value may hold: C0 (tab aside), DEL, C1 and the Unicode line
and paragraph separators, which aiohttp would quote back in its own error."""
_BAD_HEADER_NAME: Final = re.compile(r"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
"""A header name is an RFC 9110 token; anything else (a colon, a space) is refused."""

log = logging.getLogger("vaelii_llm.transport")


_SHOWN_VALUE_CHARS: Final = 256
"""The longest response header value a caller is shown, cut past this with
``…``. A request id or a rate-limit figure is tens of characters; a far end
sending kilobytes there is sending something else."""
_SHOWN_HEADERS_CHARS: Final = 2048
"""What all the shown headers of one answer may add up to (names and values):
enough for every rate-limit header a hosted API sends, so a far end cannot
make each Response and error carry its own megabyte."""
_UNSHOWN_ASCII: Final = re.compile("[\x00-\x1f\x7f]")
"""The ASCII characters dropped from a shown header value: C0 controls (a
terminal's escape and bell among them) and DEL."""
_UNSHOWN_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""The Unicode categories dropped from a shown header value: controls (C1
too), every format character (direction marks and isolates, zero-width
joiners, the byte-order mark, word joiners, Arabic letter marks, interlinear
annotation anchors: invisible, and able to rewrite how a line reads or split
an echoed key), lone surrogates (undecodable bytes, which no text output can
write), and the line and paragraph separators."""


def _drop_unshown(value: str) -> str:
    if value.isascii():
        return _UNSHOWN_ASCII.sub("", value)
    return "".join(char for char in value if category(char) not in _UNSHOWN_CATEGORIES)


def shown_header(value: str, withheld: Callable[[str], str] | None = None) -> str:
    """A far end's header value as a caller may see it: its controls, format
    characters and separators dropped (:data:`_UNSHOWN_CATEGORIES`), the
    credentials ``withheld`` names replaced (after the drop, so an invisible
    character cannot hide an echoed key), cut at :data:`_SHOWN_VALUE_CHARS`."""
    value = _drop_unshown(value)
    if withheld is not None:
        value = withheld(value)
    if len(value) > _SHOWN_VALUE_CHARS:
        value = value[:_SHOWN_VALUE_CHARS] + "…"
    return value


class Headers(msgspec.Struct, frozen=True, gc=False):
    """The response headers a backend hands on to callers: its request id's
    header, and the allow-list of the rest (whole ``names``, or ``prefixes``
    of names), all lowercase. No entry may match a header that can carry a
    credential."""

    request_id: str | None = None
    names: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    def read(
        self, raw: Mapping[str, str], withheld: Callable[[str], str] | None = None
    ) -> tuple[str | None, dict[str, str]]:
        """The request id and the allow-listed headers of ``raw``, names
        lowercased, each value as :func:`shown_header` makes it (``withheld``
        replacing what the request sent), past :data:`_SHOWN_HEADERS_CHARS`
        in all the rest left out."""
        names, prefixes = self.names, self.prefixes
        kept = {}
        room = _SHOWN_HEADERS_CHARS
        for name, value in raw.items():
            low = name.lower()
            if (low in names or low.startswith(prefixes)) and low not in kept:
                shown = shown_header(value, withheld)
                room -= len(low) + len(shown)
                if room < 0:
                    break
                kept[low] = shown
        found = raw.get(self.request_id) if self.request_id else None
        return (None if found is None else shown_header(found, withheld) or None), kept


NO_HEADERS: Final = Headers()
"""A far end that sends no request id and no rate-limit headers (Ollama)."""


class Endpoint(msgspec.Struct, frozen=True, gc=False):
    """Names the far end: ``label`` in every message, ``slug`` as a short id,
    ``headers`` what of a response's headers callers see, ``not_found`` the
    next step a 404 from it names (a base URL known to be wrong), if any."""

    label: str
    slug: str
    headers: Headers = NO_HEADERS
    not_found: str | None = None

    @classmethod
    def at(
        cls,
        what: str,
        shown: str,
        slug: str,
        headers: Headers = NO_HEADERS,
        not_found: str | None = None,
    ) -> Endpoint:
        """``what`` (``"the Messages API"``) at the base URL ``shown`` as
        messages name it (any ``user:password@`` already cut)."""
        label = f"{what} at {shown}"
        return cls(label=label, slug=slug, headers=headers, not_found=not_found)


class Secret:
    """An immutable holder of a credential's ``value`` beside fields that may
    be shown (``shown``, named in that order): its repr and str name those and
    withhold the value; two are equal when all their fields are. A subclass
    lists every field in ``__slots__`` and sets them once with :meth:`_hold`."""

    __slots__ = ()
    shown: ClassVar[tuple[str, ...]] = ()
    value: str

    def _hold(self, **fields: object) -> None:
        for name, held in fields.items():
            object.__setattr__(self, name, held)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a {type(self).__name__} is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a {type(self).__name__} is immutable (cannot delete {name!r})")

    def _fields(self) -> tuple[object, ...]:
        return (self.value, *(getattr(self, name) for name in self.shown))

    def __getstate__(self) -> dict[str, object]:  # copy and pickle, which set no attribute
        return dict(zip(("value", *self.shown), self._fields(), strict=True))

    def __setstate__(self, state: dict[str, object]) -> None:
        self._hold(**state)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Secret)
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.shown)
        return f"{type(self).__name__}({shown}, value=<withheld>)"

    __str__ = __repr__


class Deadline(msgspec.Struct, frozen=True, gc=False):
    """An absolute point on the running loop's clock, and the budget it was made from.

    One per turn: the headers, the body and every streamed chunk are read
    before ``when``; nothing re-arms it. ``timeout_ms`` is what
    :class:`LLMTimeout` reports. ``stall_ms`` (None: none) bounds each wait
    for content inside it, counted again whenever content arrives (see the
    failure boundary); it never extends ``when``.
    """

    timeout_ms: int
    when: float
    stall_ms: int | None = None

    @classmethod
    def after_ms(cls, timeout_ms: int, stall_ms: int | None = None) -> Deadline:
        """The deadline ``timeout_ms`` from now on the running loop's clock,
        with ``stall_ms`` as the bound between content (both checked where a
        :class:`~vaelii_llm.Request` is made)."""
        return cls(timeout_ms, asyncio.get_running_loop().time() + timeout_ms / 1000, stall_ms)

    @property
    def stall_s(self) -> float:
        """``stall_ms`` in seconds (only for a deadline that has one)."""
        assert self.stall_ms is not None
        return self.stall_ms / 1000

    def remaining(self) -> float:
        """Seconds left (zero or negative once passed)."""
        return self.when - asyncio.get_running_loop().time()


def _check_headers(headers: Mapping[str, str] | None) -> None:
    """Refuse a header an HTTP request cannot carry, naming it and never its value.

    Every turn sends its headers, so they first get a quicker check that only
    lets through what the rule allows: names of letters, digits and hyphens
    (token characters), values with nothing unprintable (every character the
    rule refuses is unprintable). Anything else, a tab in a value included,
    is checked by the rule itself, one header at a time, naming the first bad
    one.
    """
    if not headers or type(headers) is _CheckedHeaders:
        return
    names = "".join(headers)
    if (
        "" not in headers
        and names.isascii()
        and names.replace("-", "").isalnum()
        and " ".join(headers.values()).isprintable()
    ):
        return
    for name, value in headers.items():
        if not name or _BAD_HEADER_NAME.search(name) or _BAD_HEADER_CHARS.search(value):
            raise LLMBadCredential(name)


class _CheckedHeaders(CIMultiDictProxy[str]):
    """Headers :func:`checked_headers` has checked: immutable, so never checked again."""


def checked_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    """``headers`` checked now, for a caller that sends the same ones on many
    requests (a backend's turn headers): the requests do not check them again,
    nor does aiohttp copy them into its own type first. A bad one is refused
    here, as a request would refuse it."""
    _check_headers(headers)
    return _CheckedHeaders(CIMultiDict(headers))


SSLOption = _ssl.SSLContext | str | bool | None
"""What ``ssl=`` takes: a context (a client certificate loaded in it too), a
CA bundle path (a file, or a directory of hashed certificates), ``True`` or
``None`` for the default verification, ``False`` to verify nothing."""


class Network:
    """How a provider's sessions reach the far end: ``proxy``, ``ssl``,
    ``max_connections``, or a caller's own ``session``. Checked when built.

    ``proxy``: an ``http://`` proxy URL (``user:password@`` in it is sent as
    proxy credentials and never shown); unset, the environment's
    ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` are honoured
    (:func:`env_proxy`; no ``.netrc`` is read). ``ssl``: see :data:`SSLOption`; unset,
    ``SSL_CERT_FILE``/``SSL_CERT_DIR`` are honoured when set (read when a
    session is made), else the system's CAs. ``False`` logs a warning once
    per process. ``max_connections``: open connections to the far end per
    provider and event loop, reused from turn to turn; a turn beyond them
    waits for one, under its own deadline (see :mod:`vaelii_llm._transport.sessions`); unset,
    :data:`DEFAULT_MAX_CONNECTIONS`; ``0``, no bound (every turn at once opens
    its own). Read as resolved: never None. ``session``: an
    ``aiohttp.ClientSession`` the caller owns and closes; used as it is (its
    own proxy, TLS and pool settings), never closed here, so it serves only
    the loop it was made on.
    """

    __slots__ = ("max_connections", "proxy", "session", "ssl")

    def __init__(
        self,
        *,
        proxy: str | None = None,
        ssl: SSLOption = None,
        max_connections: int | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        if proxy is not None and (
            not isinstance(proxy, str) or not proxy.lower().startswith(("http://", "https://"))
        ):
            raise ValueError("proxy is an http:// or https:// URL")  # never quoted: a secret
        if max_connections is not None and (
            isinstance(max_connections, bool)
            or not isinstance(max_connections, int)
            or max_connections < 0
        ):
            raise ValueError(
                "max_connections is a whole number: 1 or more, or 0 for no bound, "
                f"not {max_connections!r}"
            )
        if session is not None and not isinstance(session, aiohttp.ClientSession):
            raise TypeError(f"session is an aiohttp.ClientSession, not {type(session).__name__}")
        if session is not None and (
            proxy is not None or ssl is not None or max_connections is not None
        ):
            raise ValueError(
                "session= is used as the caller made it: give proxy, ssl and "
                "max_connections to the session instead"
            )
        self.proxy = proxy
        self.ssl = _checked_ssl(ssl)
        self.max_connections: int = (
            DEFAULT_MAX_CONNECTIONS if max_connections is None else max_connections
        )
        self.session = session

    def __repr__(self) -> str:
        proxy = None if self.proxy is None else hide_userinfo(self.proxy)
        return (
            f"Network(proxy={proxy!r}, ssl={self.ssl!r}, "
            f"max_connections={self.max_connections!r}, session={self.session is not None})"
        )


_warned_unverified = False


def _checked_ssl(option: SSLOption) -> _ssl.SSLContext | bool | None:
    """``ssl=`` made ready: a path loaded into a context now (a bad one refused
    now), ``False`` warned about once per process."""
    global _warned_unverified
    if option is None or option is True or isinstance(option, _ssl.SSLContext):
        return option
    if option is False:
        if not _warned_unverified:
            _warned_unverified = True
            log.warning(
                "ssl=False: TLS certificates are not verified "
                "(anyone on the path can read and change turns)"
            )
        return False
    if isinstance(option, str | os.PathLike):
        path = os.fspath(option)
        try:
            return _ca_context(path)
        except (OSError, _ssl.SSLError) as exc:
            raise ValueError(f"ssl: cannot load the CA bundle {path!r} ({exc})") from None
    raise TypeError(
        f"ssl is an ssl.SSLContext, a CA bundle path or a bool, not {type(option).__name__}"
    )


@functools.lru_cache(maxsize=16)
def _ca_context(path: str) -> _ssl.SSLContext:
    """The default context verifying against the CA bundle at ``path``, made
    once per path (so probes naming it share one probe session per loop)."""
    if os.path.isdir(path):
        return _ssl.create_default_context(capath=path)
    return _ssl.create_default_context(cafile=path)


@functools.lru_cache(maxsize=4)
def _env_context(cafile: str | None, capath: str | None) -> _ssl.SSLContext:
    """The default context with ``SSL_CERT_FILE``/``SSL_CERT_DIR`` loaded
    (aiohttp's own default was made at import, before the caller set them)."""
    return _ssl.create_default_context(cafile=cafile or None, capath=capath or None)


def _session_ssl(option: _ssl.SSLContext | bool | None) -> _ssl.SSLContext | bool:
    if option is not None:
        return option
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if cafile or capath:
        return _env_context(cafile, capath)
    return True


DEFAULT_NETWORK: Final = Network()
"""The environment's proxy and CA settings, :data:`DEFAULT_MAX_CONNECTIONS`,
the provider's own sessions."""


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url``, or None: ``HTTP_PROXY`` or
    ``HTTPS_PROXY`` by the URL's scheme (either case; the lower case one wins,
    and ``HTTP_PROXY`` is ignored under CGI, as urllib reads them), none when
    ``NO_PROXY`` covers its host. A value with no scheme is an ``http://``
    proxy; one with another scheme (``https://``, ``socks5://``) is not
    used, and says so in a warning (without its credentials). Its
    credentials are the ``user:password@`` of its URL and nothing else: no
    credential file (``.netrc``) is read. Read when a session is made, not
    per request: a turn pays nothing for it."""
    try:
        target = URL(url)
    except (TypeError, ValueError):
        return None
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(target.scheme.lower(), "").strip()
    # With a proxy variable set, proxy_bypass reads NO_PROXY on every platform.
    if not proxy or (target.host is not None and urllib.request.proxy_bypass(target.host)):
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy
    if not proxy.lower().startswith("http://"):
        log.warning(
            "the environment's %s proxy %s is not used: only an http:// proxy is",
            target.scheme,
            hide_userinfo(proxy),
        )
        return None
    return proxy


def _named(headers: Mapping[str, str], name: str) -> bool:
    """Whether ``headers`` name the header ``name`` (lower case), in any case."""
    return any(key.lower() == name for key in headers)


def with_json_content_type(headers: Mapping[str, str] | None) -> dict[str, str]:
    """``headers`` (copied) with ``Content-Type: application/json``, unless they
    name a Content-Type of their own: what a JSON body is sent as, decided
    here only. A backend puts the result on its session, so no turn copies
    its headers to add it."""
    sent = dict(headers) if headers else {}
    if not _named(sent, "content-type"):
        sent["Content-Type"] = "application/json"
    return sent
