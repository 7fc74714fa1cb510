"""The provider: the shared HTTP skeleton over :class:`ChatCodec`, and its two factories.

The options a provider is built from are declared once, as
:class:`~vaelii_llm.providers.ollama._chat.Options`; the class and both
factories take them as keywords, and the factories show them by name to
inspection (selection reads which options a backend takes from there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar
from typing import Unpack

from vaelii_llm import _backends
from vaelii_llm.providers._http import ClientSession
from vaelii_llm.providers._http import SSLOption
from vaelii_llm.providers._http import keyword_signature
from vaelii_llm.providers._http import network
from vaelii_llm.providers._one_model import OneModelProvider
from vaelii_llm.providers.ollama._assemble import ChatChunk
from vaelii_llm.providers.ollama._chat import ChatCodec
from vaelii_llm.providers.ollama._chat import Options

__all__ = ["OllamaProvider", "generation_provider", "provider"]

_ANNOTATION_NAMES = (ClientSession, SSLOption)  # what the option records name

F = TypeVar("F", bound=Callable[..., object])


class OllamaProvider(OneModelProvider[ChatChunk, list[bytes]]):
    """A provider on one Ollama host and model. Build it with :func:`provider`.

    Concurrent turns share the provider's connection pool. ``stream`` releases
    its HTTP response when the caller stops early; iterate it under
    ``contextlib.aclosing`` so that happens at once.
    """

    model: str

    def __init__(self, **options: Unpack[Options]) -> None:
        super().__init__(ChatCodec(options), network(options))


def _takes_options(factory: F) -> F:
    """``factory`` shown to inspection with one keyword per option, default None."""
    factory.__signature__ = keyword_signature(Options, OllamaProvider)  # type: ignore[attr-defined]
    return factory


@_takes_options
def provider(**options: Unpack[Options]) -> OllamaProvider:
    """A provider built from ``options`` (see
    :class:`~vaelii_llm.providers.ollama._chat.Options`: ``host``, ``model``,
    ``num_ctx``, ``keep_alive``, ``headers``, ``proxy``, ``ssl``,
    ``max_connections``, ``session``). No I/O happens here. Raises
    ValueError for a host that names none, or a network option out of shape."""
    return OllamaProvider(**options)


@_takes_options
def generation_provider(**options: Unpack[Options]) -> OllamaProvider:
    """:func:`provider` on the generation model (``VAELII_OLLAMA_GENERATION_MODEL``)
    unless ``model`` names another."""
    chosen: Options = {**options, "model": _backends.ollama_generation_model(options.get("model"))}
    return provider(**chosen)
