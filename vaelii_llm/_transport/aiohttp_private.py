"""The one place the package reads aiohttp's private state: where aiohttp
keeps a credential in records it gives no public way to reach.

* A connection failure (:class:`aiohttp.ClientConnectorError` and its kin)
  keeps its connection key, the proxy's URL and credentials in it, as
  ``_conn_key``: a typed error chains that failure, so the key is replaced
  by one without them (:func:`connection_key`, :func:`replace_connection_key`).
* A session keeps its own proxy and the proxy's credentials as
  ``_default_proxy`` and ``_default_proxy_auth``: what a caller's session
  sends is withheld from errors as the provider's own is
  (:func:`session_proxy`).

Everything else goes through aiohttp's public parts. The shape read here
is checked once per process, at first use (:func:`known`): should aiohttp
keep these elsewhere, one WARNING says so and nothing here is read (the
proxy's credentials are then withheld only where the package set them).
"""

from __future__ import annotations

import functools
import logging
from typing import Any
from typing import Final

import aiohttp
from aiohttp.client_reqrep import ConnectionKey

__all__ = ["connection_key", "known", "replace_connection_key", "session_proxy"]

log = logging.getLogger("vaelii_llm.transport")

_KEY: Final = "_conn_key"
_PROXY: Final = "_default_proxy"
_PROXY_AUTH: Final = "_default_proxy_auth"


@functools.cache
def known() -> bool:
    """Whether aiohttp keeps the records above where this module reads them
    (checked once per process); a WARNING, once, when it does not."""
    shape = _shape()
    if shape is not None:
        log.warning(
            "aiohttp %s keeps %s elsewhere than vaelii_llm reads it: a proxy's "
            "credentials in aiohttp's own records are no longer withheld from errors",
            aiohttp.__version__,
            shape,
        )
        return False
    return True


def _shape() -> str | None:
    """What differs from the shape known (None: nothing)."""
    attrs: frozenset[str] = getattr(aiohttp.ClientSession, "ATTRS", frozenset())
    missing = [name for name in (_PROXY, _PROXY_AUTH) if name not in attrs]
    if missing:
        return "a session's proxy (" + ", ".join(missing) + ")"
    try:
        fields: list[Any] = [None] * len(ConnectionKey._fields)
        key = ConnectionKey(*fields)
        failure = aiohttp.ClientConnectorError(key, OSError(1, "probe"))
    except Exception:  # any failure is a shape not known
        return "a connection failure's key"
    if getattr(failure, _KEY, None) is not key:
        return "a connection failure's key (_conn_key)"
    return None


def connection_key(exc: BaseException) -> ConnectionKey | None:
    """The connection key ``exc`` keeps (a connection failure's), if any."""
    if not known():
        return None
    key = getattr(exc, _KEY, None)
    return key if isinstance(key, ConnectionKey) else None


def replace_connection_key(exc: BaseException, key: ConnectionKey) -> None:
    """Make ``key`` the connection key ``exc`` keeps (one it kept before)."""
    setattr(exc, _KEY, key)


def session_proxy(session: aiohttp.ClientSession) -> tuple[Any, Any]:
    """The proxy a session sends through and its credentials (None, None
    when it names none, or aiohttp keeps them elsewhere)."""
    if not known():
        return None, None
    return getattr(session, _PROXY, None), getattr(session, _PROXY_AUTH, None)
