"""An incremental, sans-IO decoder for ``text/event-stream`` (server-sent events).

Feed it the body's bytes as they arrive; it hands back each event once its
blank line has arrived. It follows the WHATWG event-stream rules a JSON API
relies on:

- lines end in CR, LF or CRLF, and a CRLF split across two chunks is one line end;
- ``event:`` names the event (``"message"`` when a frame names none or an empty one);
- ``data:`` lines are joined with ``"\\n"``; a frame with no ``data:`` line is
  no event (a comment-only or ``event:``-only frame dispatches nothing);
- ``id:`` sets the last event id, which every later event carries until the
  next ``id:`` (an id holding NUL is ignored); ``retry:`` and unknown fields
  are ignored;
- a line starting with ``:`` is a comment (keep-alive pings);
- one space after the field's colon is dropped; a leading UTF-8 BOM is dropped;
- at the end of the stream an unfinished frame (no blank line after it) is
  discarded, not dispatched. Whether a stream ended with its terminal event is
  the backend's question: this decoder cannot know which event that is.

Lines are split on bytes, before decoding (``str.splitlines`` would also break
on ``\\x1c`` or ``\\u2028`` inside a JSON string). A frame's data is decoded as
strict UTF-8: the wires this package speaks carry JSON, and a replacement
character silently written into a model's answer is worse than a refusal.

Cost is linear in the bytes fed, also for one huge event delivered in many
small chunks: only the newly fed bytes are searched for line ends (the search
never goes back over the unfinished line), and an unfinished line grows in one
``bytearray``, in place, never by ``bytes +=``.
"""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import Any, Final

import msgspec

from vaelii_llm.errors import LLMBadResponse

__all__ = ["MAX_EVENT_BYTES", "SSEDecoder", "SSEEvent"]

MAX_EVENT_BYTES: Final = 16 * 2**20
"""The most bytes one event (or one NDJSON line) may take before it is refused.

A decoder must hold an event whole before it can hand it over, so without a
cap a far end (or anything in front of it) could make us buffer without bound
by never sending the blank line. 16 MiB is far above any legitimate frame on
these wires: a streamed delta is a few hundred bytes, and the largest single
frames (a whole tool input or a final message with its content) are bounded by
the model's output limit, at most a few hundred thousand tokens ≈ a few MiB of
JSON. It is also well under the 32 MiB whole-body cap of the transport, so a
refused event never needs more memory than a refused body would.
"""

_BOM: Final = b"\xef\xbb\xbf"
_LF: Final = 0x0A
_CR: Final = 0x0D
_COLON: Final = 0x3A
_MESSAGE: Final = b"message"
_OPENING: Final = 4096
"""How much of a refused frame the error carries: enough to recognise it."""
_NAMES_KEPT: Final = 64
"""How many event types one decoder remembers by their line (a far end
inventing a new one per frame gains nothing but a bounded dict)."""
_REGULAR_AT_LEAST: Final = 4
"""Fewer whole frames than this in a chunk are read a line at a time: checking
their shape first would cost more than it saves."""
_AFTER_DATA: Final = itemgetter(slice(6, None))
"""A ``data: `` line's value."""


class SSEEvent(msgspec.Struct, frozen=True, gc=False):
    """One dispatched event: its type, its joined data, and the last event id."""

    event: str
    data: str
    id: str | None = None


class SSEDecoder:
    """Turns chunks of an event stream into :class:`SSEEvent` values.

    ``feed(chunk)`` returns the events that chunk completed (often none, often
    several); ``feed(b"")`` marks the end of the stream and returns ``[]``,
    discarding an unfinished frame. Feeding after the end is a programming
    error (``RuntimeError``). A frame over ``max_event_bytes`` or an event that
    is not UTF-8 raises :class:`~vaelii_llm.errors.LLMBadResponse` naming
    ``label``; after that the decoder must not be fed again.
    """

    __slots__ = (
        "_bom_checked",
        "_buf",
        "_clean",
        "_data",
        "_ended",
        "_event",
        "_frame_bytes",
        "_label",
        "_last_id",
        "_max",
        "_names",
        "_skip_lf",
        "_valid",
    )

    def __init__(self, label: str = "the far end", max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        if max_event_bytes < 1:
            raise ValueError(f"max_event_bytes must be positive, not {max_event_bytes}")
        self._label = label
        self._max = max_event_bytes
        self._buf = bytearray()  # the unfinished line: bytes after the last line end
        self._skip_lf = False  # the last chunk ended in a CR that may be half a CRLF
        self._bom_checked = False
        self._ended = False
        self._event: bytes | None = None  # the frame's event type
        self._data: list[bytes] = []  # the frame's data lines
        self._frame_bytes = 0  # bytes of the frame's finished lines
        self._last_id: str | None = None
        self._valid = False  # feed_frames: the chunk's whole lines are known to be UTF-8
        self._clean = True  # no line of the unfinished frame is unchecked
        self._names: dict[bytes, bytes] = {}  # feed_frames: event line -> its type

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that has not finished (0 at a frame boundary)."""
        return self._frame_bytes + len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[SSEEvent]:
        """Take the next chunk of the stream; return the events it completed."""
        lines = self._take(data, False)
        if not lines:
            return []
        events: list[SSEEvent] = self._lines(lines, False, False)
        if self._frame_bytes + len(self._buf) > self._max:
            self._refuse(self._buf)
        return events

    def feed_frames(self, data: bytes | bytearray | memoryview) -> list[tuple[bytes, bytes]]:
        """:meth:`feed`, with each event as a ``(type, data)`` pair of bytes.

        For a backend that decodes the data itself (``msgspec`` takes bytes):
        nothing is decoded to ``str`` and no :class:`SSEEvent` is built. The
        type is ``b"message"`` when the frame names none; the last event id is
        kept (:meth:`feed` carries it) but not handed over. The same rules and
        refusals apply: both bytes are checked to be UTF-8 (once per chunk
        when the chunk's lines are valid as a whole, else per event), so an
        event :meth:`feed` refuses is refused here too, at the same point.
        """
        lines = self._take(data, True)
        if not lines:
            return []
        frames: list[tuple[bytes, bytes]] = (
            self._valid_frames(lines) if self._valid else self._lines(lines, True, False)
        )
        if self._frame_bytes + len(self._buf) > self._max:
            self._refuse(self._buf)
        return frames

    def _take(self, data: bytes | bytearray | memoryview, validate: bool) -> list[bytes]:  # noqa: C901
        """Buffer ``data``; return the whole lines it completed (cap checked).

        With ``validate``, ``_valid`` says whether those lines are UTF-8 as a
        whole (they are cut only at CR or LF, so each one is then too).
        """
        if self._ended:
            raise RuntimeError("SSEDecoder.feed() called after the end of the stream")
        if not data:
            self._ended = True
            self._buf.clear()
            self._data = []
            self._event = None
            return []
        if not isinstance(data, bytes):
            data = bytes(data)
        if self._skip_lf:
            self._skip_lf = False
            if data[0] == _LF:
                data = data[1:]
        buf = self._buf
        if not self._bom_checked:
            buf += data
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                return []
            data = bytes(buf.removeprefix(_BOM))
            buf.clear()
            self._bom_checked = True
        if not data:
            return []
        # Only the new bytes are searched and split: the unfinished line in
        # ``buf`` is never scanned again, so one huge event costs its size.
        lines = data.splitlines()
        last = data[-1]
        if last in (_LF, _CR):
            self._skip_lf = last == _CR
            partial = b""
        else:
            partial = lines.pop()
        if not lines:
            buf += partial
            if self._frame_bytes + len(buf) > self._max:
                self._refuse(buf)
            return []
        held = len(buf)
        if held:
            lines[0] = bytes(buf) + lines[0]
            buf.clear()
        buf += partial
        if self._frame_bytes + held + len(data) > self._max:
            self._check_cap(lines)  # rare: only a chunk that could hold an over-cap frame
        if validate:
            # One check for the chunk's whole lines (a view: no copy), and the
            # held head of the first one; a failure only means "check per event".
            # The frame carried in from earlier chunks must be known good too.
            try:
                str(memoryview(data)[: len(data) - len(partial)], "utf-8")
                if held:
                    lines[0].decode()
                self._valid = self._clean
            except UnicodeDecodeError:
                self._valid = False
        return lines

    def _valid_frames(self, lines: list[bytes]) -> list[tuple[bytes, bytes]]:
        """:meth:`_lines` for ``raw`` pairs of lines known to be UTF-8: the hot
        path of :meth:`feed_frames`.

        A JSON API writes every frame as ``event: <type>``, ``data: <json>``
        and a blank line. From the first frame boundary of the chunk, the
        lines that follow are checked to be all of that shape, three at a time,
        in one pass per column (no Python step per line); if they are, their
        frames are made in one step. Whatever is not (the unfinished frame
        the chunk began in, the one it ends in, a stream of any other shape)
        goes through :meth:`_frames_by_line`.
        """
        held = self._frame_bytes
        try:
            start = lines.index(b"") + 1  # the first frame boundary
        except ValueError:
            start = len(lines)
        count = (len(lines) - start) // 3
        regular = None
        if count >= _REGULAR_AT_LEAST:
            end = start + 3 * count
            regular = self._regular_frames(lines, start, end)
        if regular is None:
            frames = self._frames_by_line(lines)
        else:
            frames = self._frames_by_line(lines[:start])
            frames += regular
            frames += self._frames_by_line(lines[end:])
        self._clean = True
        self._frame_bytes = _unfinished_bytes(lines, held)
        return frames

    def _regular_frames(
        self, lines: list[bytes], start: int, end: int
    ) -> list[tuple[bytes, bytes]] | None:
        """The frames of ``lines[start:end]`` when those lines are whole frames
        of exactly ``event: <type>``, ``data: <data>``, blank; else None.
        The decoder keeps each type it meets by its line, an empty one as
        ``message``, as the frame is dispatched."""
        events = lines[start:end:3]
        data = lines[start + 1 : end : 3]
        if (
            any(lines[start + 2 : end : 3])
            or not all(map(bytes.startswith, events, repeat(b"event: ")))
            or not all(map(bytes.startswith, data, repeat(b"data: ")))
        ):
            return None
        names = self._names
        new = set(events).difference(names)
        if new:
            if len(names) + len(new) > _NAMES_KEPT:
                return None  # more types than a decoder keeps
            for line in new:
                names[line] = line[7:] or _MESSAGE
        return list(zip(map(names.__getitem__, events), map(_AFTER_DATA, data), strict=True))

    def _frames_by_line(self, lines: list[bytes]) -> list[tuple[bytes, bytes]]:
        """:meth:`_lines` for ``raw`` pairs of lines known to be UTF-8, a line
        at a time, with the frame's first data line held apart (nearly every
        frame has one), so a frame costs no list, and the stream's event types
        looked up by their line rather than cut from it again (a stream names
        a handful; at most :data:`_NAMES_KEPT`). Any line but a blank one,
        ``data: `` and ``event: `` goes through :meth:`_lines`, which applies
        the general field rule."""
        frames: list[tuple[bytes, bytes]] = []
        if not lines:
            return frames
        append = frames.append
        names = self._names
        name = names.get
        pending = self._data
        event = self._event
        first = None  # the frame's data line while it has one (``pending`` is then empty)
        if len(pending) == 1:
            first, pending = pending[0], []
        for line in lines:
            if not line:
                if first is not None:
                    append((event or _MESSAGE, first))
                    first = None
                elif pending:
                    append((event or _MESSAGE, b"\n".join(pending)))
                    pending = []
                event = None
            elif line.startswith(b"data: "):
                if first is None and not pending:
                    first = line[6:]
                else:
                    if first is not None:
                        pending = [first]
                        first = None
                    pending.append(line[6:])
            elif line.startswith(b"event: "):
                event = name(line)
                if event is None:
                    event = line[7:] or _MESSAGE
                    if len(names) < _NAMES_KEPT:
                        names[line] = event
            else:
                self._data = [first] if first is not None else pending
                self._event = event
                frames += self._lines([line], True, True)
                pending = self._data
                event = self._event
                first = None
                if len(pending) == 1:
                    first, pending = pending[0], []
        self._data = [first] if first is not None else pending
        self._event = event
        return frames

    def _lines(self, lines: list[bytes], raw: bool, valid: bool) -> list[Any]:  # noqa: C901
        """Apply whole lines to the frame being built; return the events dispatched,
        as :class:`SSEEvent` values or, with ``raw``, ``(type, data)`` pairs
        (``valid``: the lines are known to be UTF-8, so no event is checked).

        The hot loop: one test per line for the two common fields, no size
        accounting (``_check_cap`` has done it when it could matter).
        """
        events: list[Any] = []
        data = self._data
        event = self._event
        joined = b""
        try:
            for line in lines:
                if not line:
                    if data:
                        joined = data[0] if len(data) == 1 else b"\n".join(data)
                        if not raw:
                            events.append(
                                SSEEvent(
                                    event.decode() if event else "message",
                                    joined.decode(),
                                    self._last_id,
                                )
                            )
                        else:
                            if not valid:
                                if event:
                                    event.decode()
                                joined.decode()
                            events.append((event or _MESSAGE, joined))
                        data = []
                    event = None
                elif line.startswith(b"data: "):
                    data.append(line[6:])
                elif line.startswith(b"event: "):
                    event = line[7:]
                elif line[0] != _COLON:  # not a comment: the general field rule
                    colon = line.find(b":")
                    if colon < 0:
                        name, value = line, b""
                    else:
                        name, value = line[:colon], line[colon + 1 :]
                        if value[:1] == b" ":
                            value = value[1:]
                    if name == b"data":
                        data.append(value)
                    elif name == b"event":
                        event = value
                    elif name == b"id" and b"\0" not in value:
                        joined = value
                        self._last_id = value.decode()
        except UnicodeDecodeError as exc:
            raise LLMBadResponse(
                self._label, "sent an event that is not UTF-8", bytes(joined or line)
            ) from exc
        self._data = data
        self._event = event
        # Whether the frame left unfinished is known to be UTF-8 (see _take).
        self._clean = valid or (not data and not event)
        self._frame_bytes = _unfinished_bytes(lines, self._frame_bytes)
        return events

    def _check_cap(self, lines: list[bytes]) -> None:
        """Refuse the block if a frame in it, with what came before, is over the cap."""
        size = self._frame_bytes
        first = 0
        for n, line in enumerate(lines):
            if not line:
                size = 0
                first = n + 1
                continue
            size += len(line) + 1
            if size > self._max:
                self._refuse(b"\n".join(lines[first : n + 1]))

    def _refuse(self, pending: bytes | bytearray) -> None:
        opening = bytes(pending[:_OPENING])
        raise LLMBadResponse(
            self._label,
            f"sent an event over the {self._max}-byte cap (its opening is kept)",
            opening,
        )


def _unfinished_bytes(lines: list[bytes], held: int) -> int:
    """The unfinished frame's size after ``lines``: its lines at their end,
    plus the ``held`` bytes it had before them when no blank line came."""
    tail = 0
    for line in reversed(lines):
        if not line:
            return tail
        tail += len(line) + 1
    return tail + held
