"""The provider: the shared HTTP skeleton over :class:`ChatCodec`, and its factory.

The options a provider is built from are declared once, as
:class:`~vaelii_llm.providers.openai._chat.Options`; the class and the
factory take them as keywords (``**options: Unpack[Options]``), and
selection reads which options the factory takes from that signature.
"""

from __future__ import annotations

from typing import Unpack

from vaelii_llm._wire.sse import Frame
from vaelii_llm.providers._http import network
from vaelii_llm.providers._one_model import OneModelProvider
from vaelii_llm.providers.openai._assemble import Completion
from vaelii_llm.providers.openai._chat import ChatCodec
from vaelii_llm.providers.openai._chat import Options

__all__ = ["OpenAIProvider", "provider"]


class OpenAIProvider(OneModelProvider[Completion, list[Frame]]):
    """A provider on one OpenAI-compatible server and model. Build it with :func:`provider`.

    Concurrent turns share the provider's connection pool. ``stream`` releases
    its HTTP response when the caller stops early; iterate it under
    ``contextlib.aclosing`` so that happens at once.
    """

    def __init__(self, **options: Unpack[Options]) -> None:
        super().__init__(ChatCodec(options), network(options))


def provider(**options: Unpack[Options]) -> OpenAIProvider:
    """A provider built from ``options`` (see
    :class:`~vaelii_llm.providers.openai._chat.Options`: ``base_url``,
    ``api_key``, ``model``, ``headers``, ``max_tokens_field``). No I/O happens
    here. Raises :class:`~vaelii_llm.errors.LLMBadCredential` for a key holding
    a control character, ValueError for an unknown ``max_tokens_field``."""
    return OpenAIProvider(**options)
