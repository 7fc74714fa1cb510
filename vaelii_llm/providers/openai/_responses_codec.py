"""The codec the shared HTTP skeleton drives for ``/responses`` (no I/O here),
and the options a provider is built from.

The key, the caller's headers, the base URL and its user:password rule are
the Chat Completions backend's, read by the base both codecs share
(:class:`~vaelii_llm.providers.openai._server.ServerCodec`): the same server,
another path.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import Final

import msgspec

from vaelii_llm import errors
from vaelii_llm._base_url import BaseURL
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._transport.boundary import DEFAULT_MAX_BODY_BYTES
from vaelii_llm._transport.settings import Endpoint
from vaelii_llm._wire.sse import Frame
from vaelii_llm._wire.sse import SSEFrames
from vaelii_llm.providers._http import NetworkOptions
from vaelii_llm.providers.openai._responses_assemble import WHOLE_DECODER
from vaelii_llm.providers.openai._responses_assemble import EventAssembler
from vaelii_llm.providers.openai._responses_assemble import Whole
from vaelii_llm.providers.openai._responses_assemble import cut_at_cap
from vaelii_llm.providers.openai._responses_assemble import not_sse
from vaelii_llm.providers.openai._responses_assemble import response_of
from vaelii_llm.providers.openai._responses_request import COUNT_PATH
from vaelii_llm.providers.openai._responses_request import RESPONSES_PATH
from vaelii_llm.providers.openai._responses_request import responses_body
from vaelii_llm.providers.openai._server import ServerCodec
from vaelii_llm.providers.openai._shared import HEADERS

__all__ = ["Options", "ResponsesCodec", "endpoint"]

_ENCODER: Final = msgspec.json.Encoder()


class Options(NetworkOptions, total=False):
    """What a provider is built from, each optional (None: unset).

    ``base_url``: default ``OPENAI_BASE_URL``. ``api_key``: default
    ``OPENAI_API_KEY``; none is fine (a local server). ``model``: default
    ``VAELII_OPENAI_MODEL``; none sends none. ``headers``: sent on every
    request (their ``Authorization`` beats the key's), never logged or shown.
    ``store``: True asks the far end to keep each response (default: it is
    told not to). ``proxy``, ``ssl``, ``max_connections``, ``session``: as on
    every HTTP backend (:class:`~vaelii_llm.providers._http.NetworkOptions`).
    """

    base_url: str | None
    api_key: str | None
    model: str | None
    headers: Mapping[str, str] | None
    store: bool | None


def endpoint(base: BaseURL) -> Endpoint:
    """How the server at ``base`` is named in messages (a password cut)."""
    return Endpoint.at("the Responses API", base.shown, "openai", HEADERS)


class _BoundedFrames(SSEFrames):
    """The stream's frames, refused (:class:`~vaelii_llm.errors.LLMBadResponse`)
    once its body passes :data:`DEFAULT_MAX_BODY_BYTES`, the bound a whole
    body has: a stream of tiny deltas is otherwise held whole in memory."""

    __slots__ = ("_left",)

    def __init__(self, label: str, refuse: Callable[[bytes, str], Exception]) -> None:
        super().__init__(label, refuse)
        self._left = DEFAULT_MAX_BODY_BYTES

    def feed(self, data: bytes) -> list[Frame]:
        left = self._left = self._left - len(data)
        if left < 0:
            raise errors.LLMBadResponse(
                self._label,
                f"streamed more than {DEFAULT_MAX_BODY_BYTES} bytes, the bound of a whole body",
            )
        return super().feed(data)


class ResponsesCodec(ServerCodec):
    """``/responses`` as the skeleton drives it; also a token counter
    (``/responses/input_tokens``). Built from :class:`Options`, each resolved
    once: the server's as :class:`ServerCodec` reads them, then ``store``."""

    whole_decoder: Final = WHOLE_DECODER

    def __init__(self, options: Options) -> None:
        super().__init__(
            options, Options.__annotations__, "Responses API", RESPONSES_PATH, endpoint
        )
        self.store = bool(options.get("store"))
        self.count_url = self.base.at(COUNT_PATH)

    def body(self, request: Request, *, stream: bool) -> bytes:
        return responses_body(
            request, model=self.model, store=self.store, stream=stream, label=self.endpoint.label
        )

    def whole(self, parsed: Whole) -> Response:
        return response_of(parsed, self.endpoint.label)

    def stream_decoder(self) -> SSEFrames:
        return _BoundedFrames(self.endpoint.label, not_sse)

    def assembler(self, *, deltas: bool) -> EventAssembler:
        return EventAssembler(self.endpoint.label, deltas=deltas)

    def settle(self, response: Response, request: Request) -> Response:
        """The turn as cut where the server's word cannot say so (see
        :func:`~vaelii_llm.providers.openai._responses_assemble.cut_at_cap`)."""
        return cut_at_cap(response, request.max_tokens)

    def count_body(self, request: Request) -> bytes:
        return responses_body(
            request,
            model=self.model,
            store=False,
            stream=False,
            count=True,
            label=self.endpoint.label,
        )

    def count_headers(self, request: Request, *, credential: None) -> None:
        return None

    def count_of(self, parsed: Any) -> int:
        label = self.endpoint.label
        if type(parsed) is not dict:
            raise errors.LLMBadResponse(
                label, "answered a token count that is no object", _ENCODER.encode(parsed)
            )
        if "error" in parsed:
            raise errors.LLMApiError(label, 200, _ENCODER.encode(parsed).decode())
        count = parsed.get("input_tokens")
        if type(count) is not int or count < 0:
            raise errors.LLMBadResponse(
                label, "answered a token count with no input_tokens count", _ENCODER.encode(parsed)
            )
        return count
