"""A bad switch value, named before any I/O.

A provider kind that names no backend, or a base URL that no client could
reach (a scheme other than http or https, whitespace, no host, a port that is
no number), is a configuration error, not an outage: the command refuses it
by the variable's name and what is wrong with the value's shape, before it
probes anything, instead of reporting the far end unreachable. A value is
never quoted whole (a URL may carry a password); a scheme or a kind is shown
only when it is a short plain word.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit

from vaelii_llm import _backends
from vaelii_llm import config
from vaelii_llm._backends import REGISTRY
from vaelii_llm._transport.urls import hide_userinfo
from vaelii_llm.errors import LLMBadSwitch

__all__ = ["bad_kind", "bad_switches", "url_flaw"]

_WORD: Final = re.compile(r"[A-Za-z][A-Za-z0-9+._-]{0,15}")
"""What may be quoted of a value: a short plain word (a kind, a scheme),
shorter than any credential."""

_READ_AS_OLLAMA_READS: Final = frozenset({"VAELII_OLLAMA_HOST", "OLLAMA_HOST"})
"""Host switches read as Ollama reads ``OLLAMA_HOST``: scheme and port optional."""


def _shown(word: str) -> str:
    return repr(word) if _WORD.fullmatch(word) else f"a value of {len(word)} characters"


def bad_kind(kind: str, named_by: str) -> str | None:
    """Why the provider ``kind`` (read from ``named_by``) names no backend, or None."""
    if kind in REGISTRY:
        return None
    kinds = sorted(REGISTRY)
    listed = ", ".join(kinds[:-1]) + f" or {kinds[-1]}"
    return f"{named_by} names no backend (it is {_shown(kind)}); set it to {listed}"


def url_flaw(value: str, *, scheme_optional: bool = False) -> str | None:
    """What keeps ``value`` from being an http(s) URL a client can reach, in
    words that quote none of it but a plain scheme; None when it reads."""
    text = hide_userinfo(value.strip())
    if "://" not in text and not scheme_optional:
        scheme, colon, _ = text.partition(":")
        if colon and _WORD.fullmatch(scheme) and scheme.lower() not in config.SCHEME_PORTS:
            return f"its scheme is {scheme!r}, not http or https"
        return "it names no scheme (http:// or https://)"
    if "://" not in text:  # read as Ollama reads a host: a bare IPv6 literal bracketed
        bare = text.split("/", 1)[0]
        if bare.count(":") > 1 and not bare.startswith("["):
            text = f"[{bare}]{text[len(bare) :]}"
        text = "http://" + text
    scheme = text.split("://", 1)[0]
    if scheme.lower() not in config.SCHEME_PORTS:
        return f"its scheme is {_shown(scheme)}, not http or https"
    if any(c.isspace() for c in text):
        return "it holds whitespace"
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - reading it checks it
    except ValueError:
        return "its host or port does not read (a port is a whole number up to 65535)"
    if not parts.hostname:
        return "it names no host"
    return None


def bad_switches(kind: str) -> str | None:
    """Why a switch the backend ``kind`` reads is unusable (one line naming
    the variable and the fault, never the value), or None: any of them
    holding a control character (read at a turn's start for some, such as
    ``VAELII_OLLAMA_NUM_CTX``), or a URL switch no client could reach."""
    backend = REGISTRY.get(kind)
    if backend is None:
        return None
    for row in backend.switch_table():
        try:
            config.variable(row.name)  # a secret's own check names its header instead
        except LLMBadSwitch as exc:
            return str(exc)
    if backend.host_switch is None:
        return None
    names = [backend.host_switch]
    if backend.host_switch in _READ_AS_OLLAMA_READS:
        names.append("OLLAMA_HOST")
    for name in names:
        raw = config.variable(name)
        if raw is None or not raw.strip():
            continue
        if name == "OLLAMA_HOST" and _backends.ollama_host() != raw.strip():
            continue  # not the one read: a bind address, or VAELII_OLLAMA_HOST wins
        flaw = url_flaw(raw, scheme_optional=name in _READ_AS_OLLAMA_READS)
        if flaw is not None:
            return (
                f"{name} is not a URL a client can reach: {flaw}; "
                "set it to http(s)://HOST[:PORT][/PATH]"
            )
    return None
