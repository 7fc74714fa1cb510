"""Reading an Ollama host the way Ollama reads ``OLLAMA_HOST``, and the vote
pool's host list (``host[*n],…``) made of such hosts.

Pure string work, no I/O, so the vote pool can parse its host list without
loading the HTTP backend.
"""

from __future__ import annotations

from typing import Final, NamedTuple
from urllib.parse import urlsplit

from vaelii_llm import config
from vaelii_llm.config import DEFAULT_OLLAMA_PORT, SCHEME_PORTS
from vaelii_llm.errors import LLMBadHosts

__all__ = [
    "DEFAULT_CALLS_PER_HOST",
    "DEFAULT_PORT",
    "Host",
    "hosts",
    "normalize_host",
]

DEFAULT_PORT: Final = DEFAULT_OLLAMA_PORT
"""Ollama's own port: the one its default host names."""

DEFAULT_CALLS_PER_HOST: Final = 2
"""``n`` of a ``host[*n]`` entry that names none."""


def normalize_host(host: str) -> str:
    """A base URL (``scheme://host:port``, no trailing slash) for ``host``.

    A host with no scheme gets ``http://`` and, when it names no port, Ollama's
    :data:`DEFAULT_PORT`; a host with a scheme keeps that scheme's own port
    (:data:`SCHEME_PORTS`).
    IPv6 literals keep their brackets; a bare IPv6 literal is bracketed.
    A path after the host is kept (a reverse proxy may mount Ollama under one).
    Raises ValueError for a blank host, one that names no host at all, and one
    carrying a ``user:password@`` (a gateway's credential belongs in the
    provider's ``headers=``; a message never quotes the password).
    """
    text = host.strip()
    if not text:
        raise ValueError("an empty host names no Ollama")
    shown_host = config.hide_userinfo(text)
    if "@" in text.split("://", 1)[-1].split("/", 1)[0]:
        raise ValueError(
            f"{shown_host!r} carries a user:password; pass a gateway's credential "
            "in the provider's headers= instead"
        )
    has_scheme = "://" in text
    if not has_scheme:
        if text.count(":") > 1 and not text.startswith("["):
            text = f"[{text}]"  # a bare IPv6 literal such as ::1
        text = "http://" + text
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise ValueError(f"{shown_host!r} is no host an Ollama can be reached at") from exc
    scheme = parts.scheme.lower()
    if scheme not in SCHEME_PORTS:
        raise ValueError(f"an Ollama host is http or https, not {scheme!r}")
    hostname = parts.hostname
    if not hostname:
        raise ValueError(f"{shown_host!r} names no host")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{shown_host!r} names no valid port") from exc
    if port is None:
        port = SCHEME_PORTS[scheme] if has_scheme else DEFAULT_PORT
    shown = f"[{hostname}]" if ":" in hostname else hostname
    path = parts.path.rstrip("/")
    return f"{scheme}://{shown}:{port}{path}"


class Host(NamedTuple):
    """One ``host[*n]`` entry: Ollama's base URL and how many calls it takes at once."""

    url: str
    calls: int


def hosts(explicit: str | None = None) -> list[Host]:
    """The vote pool's hosts: ``explicit``, else ``VAELII_OLLAMA_HOSTS``.

    The list is ``host[*n],…``; ``n`` defaults to :data:`DEFAULT_CALLS_PER_HOST`
    and each host is read by :func:`normalize_host` (``gpu1:8080*4`` is four
    calls at once to ``http://gpu1:8080``). Unset, it is the one configured
    Ollama host (the default ``n`` calls at once). Blank, it is no hosts,
    which the pool refuses. An empty entry, a host that will not read, or an
    ``n`` that is not a whole number of at least 1 raises
    :class:`~vaelii_llm.errors.LLMBadHosts` naming the entry.
    """
    raw = config.ollama_hosts(explicit)
    if raw is None:
        configured = config.ollama_host()
        return [Host(_read_host(configured, configured), DEFAULT_CALLS_PER_HOST)]
    raw = raw.strip()
    if not raw:
        return []
    return [_read_entry(entry) for entry in raw.split(",")]


def _read_entry(entry: str) -> Host:
    text = entry.strip()
    if not text:
        raise LLMBadHosts("an entry of the host list is empty (a stray comma?)", entry)
    host, star, count = text.rpartition("*")
    if not star:
        return Host(_read_host(text, entry), DEFAULT_CALLS_PER_HOST)
    if "*" in host:
        raise LLMBadHosts("an entry names at most one *n", entry)
    count = count.strip()
    if not (count.isascii() and count.isdigit()):
        raise LLMBadHosts("a host's *n must be a whole number of calls", entry)
    calls = int(count)
    if calls < 1:
        raise LLMBadHosts("a host's *n must be at least 1", entry)
    return Host(_read_host(host, entry), calls)


def _read_host(host: str, entry: str) -> str:
    try:
        return normalize_host(host)
    except ValueError as exc:
        raise LLMBadHosts(f"a host of the list will not read ({exc})", entry) from exc
