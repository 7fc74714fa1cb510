"""Reading an Ollama host the way Ollama reads ``OLLAMA_HOST``, an
OpenAI-compatible base URL, and the vote pool's host list (``host[*n],…``)
of any kind whose record names one (:class:`vaelii_llm._backends.Backend`).

Pure string work, no I/O, so the vote pool can parse its host list without
loading the HTTP backend.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final
from typing import NamedTuple
from urllib.parse import urlsplit

from vaelii_llm import _backends
from vaelii_llm import config
from vaelii_llm._backends import DEFAULT_OLLAMA_PORT
from vaelii_llm._backends import import_ref
from vaelii_llm._backends import record
from vaelii_llm._transport.urls import hide_userinfo
from vaelii_llm._transport.urls import userinfo
from vaelii_llm.config import SCHEME_PORTS
from vaelii_llm.errors import LLMBadHosts

__all__ = [
    "DEFAULT_CALLS_PER_HOST",
    "DEFAULT_OPENAI_PATH",
    "DEFAULT_PORT",
    "Host",
    "configured_ollama_host",
    "hosts",
    "normalize_base_url",
    "normalize_host",
]

DEFAULT_PORT: Final = DEFAULT_OLLAMA_PORT
"""Ollama's own port: the one its default host names."""

DEFAULT_CALLS_PER_HOST: Final = 2
"""``n`` of a ``host[*n]`` entry that names none."""

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
    scheme, hostname, port, path, has_scheme = _split(host, "an Ollama")
    if port is None:
        port = SCHEME_PORTS[scheme] if has_scheme else DEFAULT_PORT
    return f"{scheme}://{hostname}:{port}{path}"


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


class Host(NamedTuple):
    """One ``host[*n][/Nrpm][/Ntpm]`` entry: its base URL (an Ollama host or an
    OpenAI-compatible server), how many calls it takes at once, and the
    requests and tokens per minute it allows (None: no such limit)."""

    url: str
    calls: int
    rpm: int | None = None
    tpm: int | None = None


def hosts(explicit: str | None = None, *, kind: str = "ollama") -> list[Host]:
    """The vote pool's hosts for ``kind``: ``explicit``, else the variable its
    record names (``VAELII_OLLAMA_HOSTS``; ``VAELII_OPENAI_HOSTS``, each entry
    an OpenAI-compatible base URL read by :func:`normalize_base_url`).

    The list is ``host[*n][/Nrpm][/Ntpm],…``; ``n`` defaults to
    :data:`DEFAULT_CALLS_PER_HOST`, ``/600rpm`` and ``/2000000tpm`` cap the
    requests and tokens a minute the pool sends the host, and each host is
    read by the record's reader (for Ollama
    :func:`normalize_host`: ``gpu1:8080*4`` is four calls at once to
    ``http://gpu1:8080``). Unset, it is the record's one default host (the
    configured Ollama host; the configured ``OPENAI_BASE_URL`` as written),
    the default ``n`` calls at once. Blank, it is no hosts, which the pool
    refuses. An empty entry, a host that will not read, or an ``n`` or a
    rate that is not a whole number of at least 1 raises
    :class:`~vaelii_llm.errors.LLMBadHosts` naming the entry. A kind whose
    record names no host list is a ValueError.
    """
    backend = record(kind)
    if backend.hosts_switch is None:
        raise ValueError(f"provider {kind!r} names no pool hosts")
    raw = explicit
    if raw is None:
        value = config._getenv(backend.hosts_switch)
        raw = None if value is None else value.strip()
    if raw is None:
        if backend.default_host is None:
            return []
        return [Host(import_ref(backend.default_host)(), DEFAULT_CALLS_PER_HOST)]
    raw = raw.strip()
    if not raw:
        return []
    reader = str.strip if backend.read_host is None else import_ref(backend.read_host)
    return [_read_entry(entry, reader) for entry in raw.split(",")]


def configured_ollama_host() -> str:
    """The configured Ollama host (``VAELII_OLLAMA_HOST``…), read by
    :func:`normalize_host`: a pool's one host when no list is set."""
    configured = _backends.ollama_host()
    return _read_host(configured, configured, normalize_host)


_RATE: Final = re.compile(r"/\s*([0-9]+)\s*(rpm|tpm)\s*$", re.IGNORECASE)
"""One rate suffix at the end of an entry: ``/600rpm``, ``/2000000tpm``."""


def _read_rates(text: str, shown: str) -> tuple[str, dict[str, int]]:
    """``text`` without its ``/Nrpm`` and ``/Ntpm`` suffixes, and the rates they name."""
    rates: dict[str, int] = {}
    while (found := _RATE.search(text)) is not None:
        unit = found.group(2).lower()
        if unit in rates:
            raise LLMBadHosts(f"an entry names its {unit} once", shown)
        rates[unit] = int(found.group(1))
        if rates[unit] < 1:
            raise LLMBadHosts(f"a host's /N{unit} must be at least 1", shown)
        text = text[: found.start()].rstrip()
    return text, rates


def _read_entry(entry: str, reader: Callable[[str], str]) -> Host:
    shown = hide_userinfo(entry)  # what a refusal quotes: no password
    text, rates = _read_rates(entry.strip(), shown)
    if not text:
        raise LLMBadHosts("an entry of the host list is empty (a stray comma?)", shown)
    host, star, count = text.rpartition("*")
    if not star:
        return Host(_read_host(text, entry, reader), DEFAULT_CALLS_PER_HOST, **rates)
    if "*" in host:
        raise LLMBadHosts("an entry names at most one *n", shown)
    count = count.strip()
    if not (count.isascii() and count.isdigit()):
        raise LLMBadHosts("a host's *n must be a whole number of calls", shown)
    calls = int(count)
    if calls < 1:
        raise LLMBadHosts("a host's *n must be at least 1", shown)
    return Host(_read_host(host, entry, reader), calls, **rates)


def _read_host(host: str, entry: str, reader: Callable[[str], str]) -> str:
    try:
        return reader(host)
    except ValueError as exc:
        # the entry shown with its password cut, as the reason shows it
        raise LLMBadHosts(
            f"a host of the list will not read ({exc})", hide_userinfo(entry)
        ) from exc
