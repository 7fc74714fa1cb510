"""The vote pool's host list (``host[*n],…``) of any kind whose record names
one (:class:`vaelii_llm._backends.Backend`), each host read by its backend's
reader (:mod:`vaelii_llm._base_url` holds the built-in ones).

Pure string work, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final
from typing import NamedTuple

from vaelii_llm import config
from vaelii_llm._backends import record
from vaelii_llm._base_url import read_listed
from vaelii_llm._transport.urls import hide_userinfo
from vaelii_llm.errors import LLMBadHosts
from vaelii_llm.providers import hook

__all__ = [
    "DEFAULT_CALLS_PER_HOST",
    "Host",
    "hosts",
]

DEFAULT_CALLS_PER_HOST: Final = 2
"""``n`` of a ``host[*n]`` entry that names none."""


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
    an OpenAI-compatible base URL, ``/v1`` when it names no path).

    The list is ``host[*n][/Nrpm][/Ntpm],…``; ``n`` defaults to
    :data:`DEFAULT_CALLS_PER_HOST`, ``/600rpm`` and ``/2000000tpm`` cap the
    requests and tokens a minute the pool sends the host, and each host is
    read by the record's reader (for Ollama, a host with no scheme is
    ``http://`` and one with no port Ollama's: ``gpu1:8080*4`` is four calls at once to
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
        value = config.variable(backend.hosts_switch)
        raw = None if value is None else value.strip()
    if raw is None:
        default_host = hook(backend, "default_host")
        return [] if default_host is None else [Host(default_host(), DEFAULT_CALLS_PER_HOST)]
    raw = raw.strip()
    if not raw:
        return []
    reader: Callable[[str], str] = hook(backend, "read_host") or str.strip
    return [_read_entry(entry, reader) for entry in raw.split(",")]


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
        return Host(read_listed(text, entry, reader), DEFAULT_CALLS_PER_HOST, **rates)
    if "*" in host:
        raise LLMBadHosts("an entry names at most one *n", shown)
    count = count.strip()
    if not (count.isascii() and count.isdigit()):
        raise LLMBadHosts("a host's *n must be a whole number of calls", shown)
    calls = int(count)
    if calls < 1:
        raise LLMBadHosts("a host's *n must be at least 1", shown)
    return Host(read_listed(host, entry, reader), calls, **rates)
