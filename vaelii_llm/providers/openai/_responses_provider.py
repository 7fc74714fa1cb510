"""The provider: the shared HTTP skeleton over :class:`ResponsesCodec`, and its factory."""

from __future__ import annotations

from typing import Unpack

from vaelii_llm._wire.sse import Frame
from vaelii_llm.providers._http import network
from vaelii_llm.providers._one_model import OneModelProvider
from vaelii_llm.providers.openai._responses_assemble import Whole
from vaelii_llm.providers.openai._responses_codec import Options
from vaelii_llm.providers.openai._responses_codec import ResponsesCodec

__all__ = ["OpenAIResponsesProvider", "provider"]


class OpenAIResponsesProvider(OneModelProvider[Whole, list[Frame]]):
    """A provider on one server's Responses API and one model. Build it with :func:`provider`.

    Concurrent turns share the provider's connection pool. ``stream`` releases
    its HTTP response when the caller stops early; iterate it under
    ``contextlib.aclosing`` so that happens at once.
    """

    def __init__(self, **options: Unpack[Options]) -> None:
        super().__init__(ResponsesCodec(options), network(options))


def provider(**options: Unpack[Options]) -> OpenAIResponsesProvider:
    """A provider built from ``options`` (see
    :class:`~vaelii_llm.providers.openai._responses_codec.Options`: ``base_url``,
    ``api_key``, ``model``, ``headers``, ``store``). No I/O happens here.
    Raises :class:`~vaelii_llm.errors.LLMBadCredential` for a key holding a
    control character."""
    return OpenAIResponsesProvider(**options)
