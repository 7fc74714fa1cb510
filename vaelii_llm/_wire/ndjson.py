"""An incremental, sans-IO decoder for newline-delimited JSON (Ollama's stream).

NDJSON is one JSON value per line. :class:`NDJSONDecoder` does the framing:
fed the stream's bytes in chunks of any size, it hands back the whole lines
each chunk completed, undecoded, for the backend to decode each one where it
applies it (one pass over the stream, no list of values kept alive, and a
line read by the narrowest decoder that fits it). Lines end in LF; a CR
before it is JSON whitespace. At the end of the stream a last line without
its LF is handed over too. A value spanning two lines is refused when its
first line fails to decode: decoding line by line is what keeps the result
independent of how the bytes were split.

What a line that will not decode means is one rule, :func:`refuse_line`: an
empty line is the caller's to skip, a blank one (CR, spaces) is skipped
there, any other is :class:`~vaelii_llm.errors.LLMBadResponse` with the line
on ``err.text``.

Cost is linear in the bytes fed, also for one huge line arriving in many
chunks: only the newly fed bytes are searched for LF (never the unfinished
line again), and an unfinished line grows in one ``bytearray``, in place.
A line over :data:`~vaelii_llm._wire.sse.MAX_EVENT_BYTES` (reasoned there)
is refused rather than buffered further; the cap is checked for a whole
chunk before any of its lines is handed over.
"""

from __future__ import annotations

from typing import Final

from vaelii_llm._wire.sse import MAX_EVENT_BYTES
from vaelii_llm.errors import LLMBadResponse
from vaelii_llm.errors import excerpt

__all__ = ["NDJSONDecoder", "refuse_line"]

_OPENING: Final = 4096
"""How much of a line over the cap the error carries: enough to recognise it."""


def refuse_line(label: str, line: bytes, exc: BaseException) -> None:
    """The rule for a line that raised ``exc`` when decoded: nothing for a
    blank line (CR, spaces: skipped), else
    :class:`~vaelii_llm.errors.LLMBadResponse` naming ``label``, with the
    line on ``err.text``."""
    if line.isspace():
        return
    raise LLMBadResponse(
        label, f"sent a line that is not the expected JSON ({excerpt(str(exc), 120)})", line
    ) from exc


class NDJSONDecoder:
    """Splits an NDJSON stream into whole lines.

    ``feed(chunk)`` returns the lines that chunk completed (without their LF;
    empty and blank ones included, see :func:`refuse_line`); ``feed(b"")``
    marks the end of the stream and returns ``[last]``, the bytes after the
    last LF (``b""`` when there were none). Feeding after the end is a
    programming error (``RuntimeError``). A line over ``max_line_bytes``
    raises :class:`~vaelii_llm.errors.LLMBadResponse` naming ``label``, with
    the line's opening on ``err.text``; after that the decoder must not be
    fed again.
    """

    __slots__ = ("_buf", "_ended", "_label", "_max")

    def __init__(self, label: str = "the far end", max_line_bytes: int = MAX_EVENT_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be positive, not {max_line_bytes}")
        self._label = label
        self._max = max_line_bytes
        self._buf = bytearray()  # the unfinished line: bytes after the last LF
        self._ended = False

    @property
    def buffered(self) -> int:
        """Bytes held for a line that has not finished (0 at a line boundary)."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Take the next chunk of the stream; return the whole lines it completed."""
        if self._ended:
            raise RuntimeError("NDJSONDecoder.feed() called after the end of the stream")
        buf = self._buf
        if not data:
            self._ended = True
            last = bytes(buf)
            buf.clear()
            if len(last) > self._max:
                self._refuse(last)
            return [last]
        if not isinstance(data, bytes):
            data = bytes(data)
        # Only the new bytes are searched and split: the unfinished line in
        # ``buf`` is never scanned again, so one huge line costs its size.
        lines = data.split(b"\n")
        partial = lines.pop()
        if not lines:
            buf += partial
            if len(buf) > self._max:
                self._refuse(buf)
            return []
        held = len(buf)
        if held:
            lines[0] = bytes(buf) + lines[0]
            buf.clear()
        buf += partial
        if held + len(data) > self._max:  # rare: only a chunk that could hold an over-cap line
            for line in lines:
                if len(line) > self._max:
                    self._refuse(line)
        if len(buf) > self._max:
            self._refuse(buf)
        return lines

    def _refuse(self, line: bytes | bytearray) -> None:
        raise LLMBadResponse(
            self._label,
            f"sent a line over the {self._max}-byte cap (its opening is kept)",
            bytes(line[:_OPENING]),
        )
