"""The provider on one server and one model that a codec built from its options
describes: the shape the Ollama, Chat Completions and Responses providers share.

Each of those providers takes its own options as keywords (so each types them),
builds its codec and hands it here with the network options read from the same
keywords; what it names (``base_url``, ``model``) and how it shows itself are
written once.
"""

from __future__ import annotations

from typing import Protocol
from typing import TypeVar

from vaelii_llm._transport.settings import Network
from vaelii_llm.providers._http import Codec
from vaelii_llm.providers._http import HTTPProvider

__all__ = ["ModelCodec", "OneModelProvider"]

W = TypeVar("W")
B = TypeVar("B")


class ModelCodec(Codec[W, B], Protocol):
    """A codec that names its server and model, and the server as messages show it
    (a password cut)."""

    @property
    def base_url(self) -> str: ...

    @property
    def model(self) -> str | None: ...

    @property
    def shown_url(self) -> str: ...


class OneModelProvider(HTTPProvider[W, B]):
    """A provider on one server and model, both read off its codec.

    Concurrent turns share the provider's connection pool. ``stream`` releases
    its HTTP response when the caller stops early; iterate it under
    ``contextlib.aclosing`` so that happens at once.
    """

    def __init__(self, codec: ModelCodec[W, B], network: Network) -> None:
        self.base_url = codec.base_url
        self.model = codec.model
        self.endpoint = codec.endpoint
        self._shown = codec.shown_url
        super().__init__(codec, network=network)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self._shown!r}, model={self.model!r})"
