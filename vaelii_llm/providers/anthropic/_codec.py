"""``/v1/messages`` as the shared HTTP skeleton drives it (pure: no I/O).

The body (:mod:`._encode`), the turn's headers from the credential the
skeleton's credential step found, the whole-message decoder (:mod:`._decode`)
and, for a streamed turn, the SSE decoder and the assembler (:mod:`._stream`);
and the counting endpoint (``/v1/messages/count_tokens``), which the
skeleton's :meth:`~vaelii_llm.providers._http.HTTPProvider.count_tokens` drives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any
from typing import Final

import msgspec

from vaelii_llm._base_url import BaseURL
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._transport.settings import Endpoint
from vaelii_llm._transport.settings import Headers
from vaelii_llm._transport.settings import checked_headers
from vaelii_llm._transport.settings import with_json_content_type
from vaelii_llm._wire.sse import SSEFrames
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMBadResponse
from vaelii_llm.providers.anthropic._credentials import Credential
from vaelii_llm.providers.anthropic._decode import WHOLE_DECODER
from vaelii_llm.providers.anthropic._decode import from_parsed
from vaelii_llm.providers.anthropic._decode import not_sse
from vaelii_llm.providers.anthropic._encode import betas
from vaelii_llm.providers.anthropic._encode import build_body
from vaelii_llm.providers.anthropic._encode import count_body

if TYPE_CHECKING:
    from vaelii_llm.providers.anthropic._stream import StreamAssembler

__all__ = ["API_VERSION", "MessagesCodec", "endpoint"]

API_VERSION: Final = "2023-06-01"
"""The ``anthropic-version`` header: the version the API's published history names."""
MESSAGES_PATH: Final = "/v1/messages"
COUNT_PATH: Final = "/v1/messages/count_tokens"
HEADERS: Final = Headers(
    request_id="request-id", names=frozenset({"retry-after"}), prefixes=("anthropic-ratelimit-",)
)
"""What callers see of the Messages API's response headers."""


TRAILING_V1: Final = (
    "drop the trailing /v1 from the base URL (ANTHROPIC_BASE_URL, or base_url=): "
    "the Messages API adds /v1/messages itself; the OpenAI wires are the ones that want /v1"
)
"""The next step a 404 names when the base URL ends in ``/v1``: the same URL
the OpenAI wires are given, which answers at ``/v1/v1/messages``."""


def endpoint(base: BaseURL) -> Endpoint:
    """The far end at ``base`` as messages name it (a ``user:password@`` cut);
    its 404 names :data:`TRAILING_V1` when the URL ends in ``/v1``."""
    ends_in_v1 = base.path.endswith("/v1")
    return Endpoint.at(
        "the Messages API", base.shown, "anthropic", HEADERS, TRAILING_V1 if ends_in_v1 else None
    )


class MessagesCodec:
    """One provider's wire: where it sends, the model and effort a request
    leaves unset, and the headers of every request (the API version, a
    gateway's own)."""

    whole_decoder: Final = WHOLE_DECODER

    def __init__(self, base: BaseURL, model: str, effort: str, headers: Mapping[str, str]) -> None:
        self.url = base.at(MESSAGES_PATH)
        self.count_url = base.at(COUNT_PATH)
        # A gateway URL may carry user:password; it names the far end with them cut.
        self.shown_url = base.shown
        self.model = model
        self.effort = effort
        self._session_headers = with_json_content_type(
            {"anthropic-version": API_VERSION, **headers}
        )
        self.endpoint = endpoint(base)
        # The turn headers for (streamed, fallbacks dropped), built once each
        # for the credential they were built with.
        self._turn_headers: dict[tuple[bool, bool], Mapping[str, str]] = {}
        self._headers_for: Credential | None = None
        # The event types the far end names, shared by every turn's decoder.
        self._event_names: dict[bytes, bytes] = {}

    def session_headers(self) -> Mapping[str, str]:
        return self._session_headers

    def body(self, request: Request, *, stream: bool) -> bytes:
        body = build_body(
            request,
            model=self.model,
            effort=self.effort,
            stream=stream,
            label=self.endpoint.label,
        )
        return msgspec.json.encode(body)

    def headers(
        self, request: Request, *, stream: bool, credential: Credential
    ) -> Mapping[str, str]:
        if credential is not self._headers_for:
            self._turn_headers.clear()
            self._headers_for = credential
        key = (stream, request.fallbacks is None)
        found = self._turn_headers.get(key)
        if found is None:
            built = credential.headers()
            built["accept"] = "text/event-stream" if stream else "application/json"
            wanted = betas(request, credential)
            if wanted:
                built["anthropic-beta"] = ",".join(wanted)
            found = self._turn_headers[key] = checked_headers(built)
        return found

    def count_body(self, request: Request) -> bytes:
        body = count_body(request, model=self.model, effort=self.effort, label=self.endpoint.label)
        return msgspec.json.encode(body)

    def count_headers(self, request: Request, *, credential: Credential) -> Mapping[str, str]:
        # The count takes no fallbacks, so no fallback beta: the turn's
        # non-streamed headers for a request that drops them.
        return self.headers(
            msgspec.structs.replace(request, fallbacks=None), stream=False, credential=credential
        )

    def count_of(self, parsed: Any) -> int:
        label = self.endpoint.label
        if type(parsed) is not dict:
            raise LLMBadResponse(
                label, "answered a token count that is no object", msgspec.json.encode(parsed)
            )
        if parsed.get("type") == "error" or "error" in parsed:
            raise LLMApiError(label, 200, msgspec.json.encode(parsed).decode())
        count = parsed.get("input_tokens")
        if type(count) is not int or count < 0:
            raise LLMBadResponse(
                label,
                "answered a token count with no input_tokens count",
                msgspec.json.encode(parsed),
            )
        return count

    def whole(self, parsed: dict[str, Any]) -> Response:
        return from_parsed(parsed, self.endpoint.label)

    def stream_decoder(self) -> SSEFrames:
        return SSEFrames(self.endpoint.label, not_sse, self._event_names)

    def assembler(self, *, deltas: bool) -> StreamAssembler:
        from vaelii_llm.providers.anthropic._stream import StreamAssembler  # a stream's first

        return StreamAssembler(self.endpoint.label, deltas=deltas)
