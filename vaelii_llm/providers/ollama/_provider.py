"""The provider: the shared HTTP skeleton over :class:`ChatCodec`, and its two factories.

The options a provider is built from are declared once, as
:class:`~vaelii_llm.providers.ollama._chat.Options`; the class and both
factories take them as keywords (``**options: Unpack[Options]``), and
selection reads which options a factory takes from that signature.
"""

from __future__ import annotations

from typing import Unpack

from vaelii_llm import _backends
from vaelii_llm.providers._http import network
from vaelii_llm.providers._one_model import OneModelProvider
from vaelii_llm.providers.ollama._assemble import ChatChunk
from vaelii_llm.providers.ollama._chat import ChatCodec
from vaelii_llm.providers.ollama._chat import Options

__all__ = ["OllamaProvider", "generation_provider", "provider"]


class OllamaProvider(OneModelProvider[ChatChunk, list[bytes]]):
    """A provider on one Ollama host and model. Build it with :func:`provider`.

    Concurrent turns share the provider's connection pool. ``stream`` releases
    its HTTP response when the caller stops early; iterate it under
    ``contextlib.aclosing`` so that happens at once.
    """

    model: str

    def __init__(self, **options: Unpack[Options]) -> None:
        super().__init__(ChatCodec(options), network(options))


def provider(**options: Unpack[Options]) -> OllamaProvider:
    """A provider built from ``options`` (see
    :class:`~vaelii_llm.providers.ollama._chat.Options`: ``host``, ``model``,
    ``num_ctx``, ``keep_alive``, ``headers``, ``proxy``, ``ssl``,
    ``max_connections``, ``session``). No I/O happens here. Raises
    ValueError for a host that names none, or a network option out of shape."""
    return OllamaProvider(**options)


def generation_provider(**options: Unpack[Options]) -> OllamaProvider:
    """:func:`provider` on the generation model (``VAELII_OLLAMA_GENERATION_MODEL``)
    unless ``model`` names another."""
    chosen: Options = {**options, "model": _backends.ollama_generation_model(options.get("model"))}
    return provider(**chosen)
