"""Sans-IO decoders for the two streaming wires: SSE (Messages API) and NDJSON (Ollama).

Each decoder is fed bytes in chunks of any size with ``feed(data)`` and hands back
the events those bytes completed; ``feed(b"")`` says the stream ended. A frame or
line may be split anywhere, even inside a multi-byte UTF-8 character. No socket
and no event loop appear here, so tests feed a transcript whole, a byte at a
time or in random splits and compare the events (the h11 shape). Whatever the
bytes, the only error a decoder raises is :class:`vaelii_llm.errors.LLMBadResponse`.

Both decoders cap what they buffer for one event or line at
:data:`MAX_EVENT_BYTES`: see :mod:`vaelii_llm._wire.sse` for why.
"""

from __future__ import annotations

from vaelii_llm._wire.ndjson import NDJSONDecoder
from vaelii_llm._wire.sse import MAX_EVENT_BYTES
from vaelii_llm._wire.sse import SSEDecoder
from vaelii_llm._wire.sse import SSEEvent

__all__ = ["MAX_EVENT_BYTES", "NDJSONDecoder", "SSEDecoder", "SSEEvent"]
