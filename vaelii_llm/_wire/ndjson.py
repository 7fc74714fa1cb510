"""An incremental, sans-IO decoder for newline-delimited JSON (Ollama's stream).

One JSON value per line, each decoded by the caller's typed
``msgspec.json.Decoder`` (built once, by the backend). Lines end in LF; a CR
before it is JSON whitespace and ignored, as are blank lines. At the end of the
stream a last line without its LF is decoded too. A value spanning two lines is
refused rather than reassembled: NDJSON is line-delimited, and decoding line
by line is what keeps the result independent of how the bytes were split.

Cost is linear in the bytes fed, also for one huge line arriving in many
chunks: only the newly fed bytes are searched for LF (never the unfinished
line again), and an unfinished line grows in one ``bytearray``, in place.
A line over :data:`~vaelii_llm._wire.sse.MAX_EVENT_BYTES` (16 MiB, reasoned
there) is refused rather than buffered further; the cap is checked for a whole
chunk before any of its lines is decoded.

:meth:`NDJSONDecoder.feed_lines` hands the whole lines over undecoded, for a
backend that decodes each one as it applies it (one pass over the stream, no
list of values kept alive): it splits and caps as :meth:`~NDJSONDecoder.feed`
does, and :func:`refuse_line` applies the same rule to a line
that fails.
"""

from __future__ import annotations

from typing import Final, Generic, TypeVar

import msgspec

from vaelii_llm._wire.sse import MAX_EVENT_BYTES
from vaelii_llm.errors import LLMBadResponse, excerpt

__all__ = ["NDJSONDecoder", "refuse_line"]

T = TypeVar("T")

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


class NDJSONDecoder(Generic[T]):
    """Turns chunks of an NDJSON stream into values of the decoder's type.

    ``feed(chunk)`` returns the values of the lines that chunk completed;
    ``feed(b"")`` marks the end of the stream and returns the value of a last
    line that had no LF (or ``[]``). Feeding after the end is a programming
    error (``RuntimeError``). A line that will not decode (malformed JSON, the
    wrong shape, invalid UTF-8, nesting too deep) or one over ``max_line_bytes``
    raises :class:`~vaelii_llm.errors.LLMBadResponse` naming ``label``, with the
    line on ``err.text``; after that the decoder must not be fed again.
    """

    __slots__ = ("_buf", "_decoder", "_ended", "_label", "_max")

    def __init__(
        self,
        decoder: msgspec.json.Decoder[T],
        label: str = "the far end",
        max_line_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be positive, not {max_line_bytes}")
        self._decoder = decoder
        self._label = label
        self._max = max_line_bytes
        self._buf = bytearray()  # the unfinished line: bytes after the last LF
        self._ended = False

    @property
    def buffered(self) -> int:
        """Bytes held for a line that has not finished (0 at a line boundary)."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[T]:
        """Take the next chunk of the stream; return the values of the lines it completed."""
        return self._decode(self._split(data))

    def feed_lines(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """:meth:`feed`, with each whole line handed over undecoded.

        For a backend that decodes each line as it applies it (one pass, no
        list of values kept): the lines may include blank ones, which the
        caller skips (an empty one) or hands to :func:`refuse_line` when it
        fails to decode, so the same rules and refusals apply as in
        :meth:`feed`. The cap is checked here, as :meth:`feed` checks it:
        before any line of the chunk is handed over.
        """
        return self._split(data)

    def _split(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Buffer ``data``; return the whole lines it completed (cap checked)."""
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

    def _decode(self, lines: list[bytes]) -> list[T]:
        """Decode whole lines, skipping blank ones. The hot loop: one test and one call per line.

        A line of only whitespace never decodes (it holds no JSON value), so it
        is recognised on that failure, and the loop resumes after it: the
        common line pays no whitespace scan.
        """
        values: list[T] = []
        if not lines:
            return values
        append = values.append
        decode = self._decoder.decode
        line = b""
        rest = iter(lines)
        while True:
            try:
                for line in rest:
                    if line:
                        append(decode(line))
                return values
            except Exception as exc:  # a hostile line may raise anything: RecursionError…
                refuse_line(self._label, line, exc)

    def _refuse(self, line: bytes | bytearray) -> None:
        raise LLMBadResponse(
            self._label,
            f"sent a line over the {self._max}-byte cap (its opening is kept)",
            bytes(line[:_OPENING]),
        )
