"""The local backend: Ollama's chat API, and the probes that ask a host what it can do.

:func:`provider` builds an :class:`OllamaProvider` on one host and model (no
I/O); :func:`generation_provider` the same on the generation model. A local
host needs no credential; a hosted one (``https://ollama.com``) is sent
``OLLAMA_API_KEY`` when it is set, as ``Authorization: Bearer`` on every
request, turns and probes, as the official client sends it, and shown
nowhere. :func:`available` is a reachability probe (``/api/version``
under :data:`~vaelii_llm.providers.ollama._probes.VERSION_TIMEOUT_MS`), so the
backend can be tested end to end against a real model. :func:`warm` loads a
model and holds it resident;
:func:`capabilities`, :func:`supports_tools` and :func:`context_length` read
``/api/show``; :func:`version` reads ``/api/version``; :func:`unavailable_reason` says
why a host cannot answer; :func:`base_url` says
which host the environment names.

How a request and an answer map to the wire is told where each is done: the
request and the codec in :mod:`~vaelii_llm.providers.ollama._chat`, the
answer and the stream's reassembly (``stream`` returns the Response
``complete`` does) in :mod:`~vaelii_llm.providers.ollama._assemble`. The
session, the closed state, the turn and the stream pump are the shared
skeleton's (:mod:`vaelii_llm.providers._http`).
"""

from __future__ import annotations

from vaelii_llm import _backends
from vaelii_llm._base_url import normalize_host as read_host
from vaelii_llm._base_url import read_listed
from vaelii_llm.providers.ollama._chat import base_url
from vaelii_llm.providers.ollama._probes import available
from vaelii_llm.providers.ollama._probes import capabilities
from vaelii_llm.providers.ollama._probes import context_length
from vaelii_llm.providers.ollama._probes import supports_tools
from vaelii_llm.providers.ollama._probes import unavailable_reason
from vaelii_llm.providers.ollama._probes import version
from vaelii_llm.providers.ollama._probes import warm
from vaelii_llm.providers.ollama._provider import OllamaProvider
from vaelii_llm.providers.ollama._provider import generation_provider
from vaelii_llm.providers.ollama._provider import provider
from vaelii_llm.providers.ollama._status import cannot_call_tools
from vaelii_llm.providers.ollama._status import missing_model
from vaelii_llm.providers.ollama._status import status_lines


def default_host() -> str:
    """The configured host (``VAELII_OLLAMA_HOST``…) read as a pool reads one:
    its one host when no list is set."""
    configured = _backends.ollama_host()
    return read_listed(configured, configured, read_host)


_HOOKS = (default_host, read_host, cannot_call_tools, missing_model, status_lines)
"""What the pool and the command find here by name (:data:`vaelii_llm._backends.Hook`)."""

OllamaProvider.__module__ = __name__  # where a user finds it, as trio names its classes

__all__ = [
    "OllamaProvider",
    "available",
    "base_url",
    "capabilities",
    "context_length",
    "generation_provider",
    "provider",
    "supports_tools",
    "unavailable_reason",
    "version",
    "warm",
]
