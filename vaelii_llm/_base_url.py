"""A base URL read once, where a provider or a probe is built: every later
step (the request URLs, the name messages show, the checks on its host and
path) reads the one :class:`BaseURL` value, never the text again.

Two readings: :func:`ollama_base` reads a host the way Ollama reads
``OLLAMA_HOST`` (:func:`normalize_host`: no scheme is ``http://`` on Ollama's
port; a password refused); :func:`api_base` reads an HTTP API's base URL as
written, trimmed of its trailing ``/`` (a ``user:password@`` kept: the
transport sends it as Basic auth and withholds it from every message).
:func:`normalize_base_url` reads a pool's OpenAI-compatible host. Pure string
work, no I/O and no HTTP library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final
from urllib.parse import SplitResult
from urllib.parse import urlsplit

import msgspec

from vaelii_llm._backends import DEFAULT_OLLAMA_PORT
from vaelii_llm._transport.urls import hide_userinfo
from vaelii_llm._transport.urls import userinfo
from vaelii_llm.config import SCHEME_PORTS
from vaelii_llm.errors import LLMBadHosts

__all__ = [
    "DEFAULT_OPENAI_PATH",
    "DEFAULT_PORT",
    "BaseURL",
    "api_base",
    "normalize_base_url",
    "normalize_host",
    "ollama_base",
    "read_listed",
]


class BaseURL(msgspec.Struct, frozen=True):
    """A far end's base URL, read once: ``url`` as requests go to it (no
    trailing ``/``; a path is appended, :meth:`at`), ``shown`` as messages
    name it (a ``user:password@`` cut), its ``host`` in lower case (``""``
    when none reads) and its ``path`` (no trailing ``/``)."""

    url: str
    shown: str
    host: str
    path: str

    def at(self, path: str) -> str:
        """The URL of ``path`` below the base."""
        return self.url + path


def api_base(text: str) -> BaseURL:
    """``text`` (an HTTP API's base URL, as configured) read once, as written
    but for its trailing ``/``; what no URL parser reads has no host, and
    fails at its first request as before."""
    url = text.rstrip("/")
    try:
        parts: SplitResult | None = urlsplit(url)
    except ValueError:
        parts = None
    host = ((parts.hostname if parts else None) or "").lower()
    return BaseURL(url, hide_userinfo(url), host, parts.path.rstrip("/") if parts else "")


def ollama_base(host: str) -> BaseURL:
    """``host`` read as Ollama reads one (:func:`normalize_host`), once."""
    scheme, hostname, port, path, has_scheme = _split(host, "an Ollama")
    if port is None:
        port = SCHEME_PORTS[scheme] if has_scheme else DEFAULT_PORT
    url = f"{scheme}://{hostname}:{port}{path}"
    return BaseURL(url, url, hostname.strip("[]").lower(), path)  # a password is refused


DEFAULT_PORT: Final = DEFAULT_OLLAMA_PORT
"""Ollama's own port: the one its default host names."""

DEFAULT_OPENAI_PATH: Final = "/v1"
"""Where an OpenAI-compatible server that names no path mounts its API: vLLM,
llama.cpp's server, LM Studio, SGLang, TGI and Ollama all serve ``/v1``."""


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
    return ollama_base(host).url


def normalize_base_url(url: str) -> str:
    """An OpenAI-compatible base URL for ``url``, read as :func:`normalize_host`
    reads a host (no scheme: ``http://``; IPv6 bracketed; a password
    refused), but a URL naming no port keeps its scheme's own, and one naming
    no path gets :data:`DEFAULT_OPENAI_PATH`: ``gpu1:8000`` is
    ``http://gpu1:8000/v1``. Raises ValueError as :func:`normalize_host` does."""
    scheme, hostname, port, path, _ = _split(url, "an OpenAI-compatible server")
    shown_port = "" if port is None else f":{port}"
    return f"{scheme}://{hostname}{shown_port}{path or DEFAULT_OPENAI_PATH}"


def _split(host: str, what: str) -> tuple[str, str, int | None, str, bool]:
    """``host`` read as a URL: its scheme, its host (IPv6 bracketed), the port
    it names (None: none), its path without a trailing slash, and whether it
    named a scheme. ``what`` names the far end in the ValueError refusing it."""
    text = host.strip()
    if not text:
        raise ValueError(f"an empty host names no {what.split(' ', 1)[1]}")
    shown_host = hide_userinfo(text)
    if userinfo(text) is not None:
        raise ValueError(
            f"{shown_host!r} carries a user:password; pass a gateway's credential "
            "in the provider's headers= instead"
        )
    has_scheme = "://" in text
    if not has_scheme:
        bare = text.split("/", 1)[0]
        if bare.count(":") > 1 and not bare.startswith("["):
            text = f"[{bare}]{text[len(bare) :]}"  # a bare IPv6 literal such as ::1
        text = "http://" + text
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise ValueError(f"{shown_host!r} is no host {what} can be reached at") from exc
    scheme = parts.scheme.lower()
    if scheme not in SCHEME_PORTS:
        raise ValueError(f"{what} host is http or https, not {scheme!r}")
    hostname = parts.hostname
    if not hostname:
        raise ValueError(f"{shown_host!r} names no host")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{shown_host!r} names no valid port") from exc
    shown = f"[{hostname}]" if ":" in hostname else hostname
    return scheme, shown, port, parts.path.rstrip("/"), has_scheme


def read_listed(host: str, entry: str, reader: Callable[[str], str]) -> str:
    """``host``, an entry of a pool's host list (``entry`` as written), read
    by ``reader``; its ValueError is :class:`~vaelii_llm.errors.LLMBadHosts`
    quoting the entry with its password cut."""
    try:
        return reader(host)
    except ValueError as exc:
        # the entry shown with its password cut, as the reason shows it
        raise LLMBadHosts(
            f"a host of the list will not read ({exc})", hide_userinfo(entry)
        ) from exc
