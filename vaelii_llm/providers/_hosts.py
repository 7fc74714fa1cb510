"""Reading an Ollama host the way Ollama reads ``OLLAMA_HOST``.

Pure string work, no I/O, so the vote pool can parse its host list without
loading the HTTP backend.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from vaelii_llm.config import DEFAULT_OLLAMA_PORT, SCHEME_PORTS, hide_userinfo

__all__ = ["DEFAULT_PORT", "normalize_host"]

DEFAULT_PORT = DEFAULT_OLLAMA_PORT
_SCHEME_PORTS = SCHEME_PORTS


def normalize_host(host: str) -> str:
    """A base URL (``scheme://host:port``, no trailing slash) for ``host``.

    A host with no scheme gets ``http://`` and, when it names no port, Ollama's
    ``:11434``; a host with a scheme keeps that scheme's own port (80 or 443).
    IPv6 literals keep their brackets; a bare IPv6 literal is bracketed.
    A path after the host is kept (a reverse proxy may mount Ollama under one).
    Raises ValueError for a blank host, one that names no host at all, and one
    carrying a ``user:password@`` (a gateway's credential belongs in the
    provider's ``headers=``; a message never quotes the password).
    """
    text = host.strip()
    if not text:
        raise ValueError("an empty host names no Ollama")
    shown_host = hide_userinfo(text)
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
    if scheme not in _SCHEME_PORTS:
        raise ValueError(f"an Ollama host is http or https, not {scheme!r}")
    hostname = parts.hostname
    if not hostname:
        raise ValueError(f"{shown_host!r} names no host")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{shown_host!r} names no valid port") from exc
    if port is None:
        port = _SCHEME_PORTS[scheme] if has_scheme else DEFAULT_PORT
    shown = f"[{hostname}]" if ":" in hostname else hostname
    path = parts.path.rstrip("/")
    return f"{scheme}://{shown}:{port}{path}"
