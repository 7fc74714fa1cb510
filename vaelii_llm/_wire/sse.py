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

There is one line path (:meth:`SSEDecoder._frames`): the general field rule
a line at a time, and, for a run of whole frames in the one shape a JSON API
writes (``event: <type>``, ``data: <json>``, a blank line), the same frames
made in one step. :meth:`~SSEDecoder.feed` and
:meth:`~SSEDecoder.feed_frames` both go through it; the tests hold it to a
line-at-a-time reference written from the rules above.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import itemgetter
from typing import Final

import msgspec

from vaelii_llm.errors import LLMBadResponse

__all__ = ["MAX_EVENT_BYTES", "Frame", "SSEDecoder", "SSEEvent", "SSEFrames"]

MAX_EVENT_BYTES: Final = 16 * 2**20
"""The most bytes one event (or one NDJSON line) may take before it is refused.

A decoder must hold an event whole before it can hand it over, so without a
cap a far end (or anything in front of it) could make us buffer without bound
by never sending the blank line. 16 MiB is far above any legitimate frame on
these wires: a streamed delta is a few hundred bytes, and the largest single
frames (a whole tool input or a final message with its content) are bounded by
the model's output limit, at most a few hundred thousand tokens ≈ a few MiB of
JSON. It is also well under the transport's whole-body cap
(:data:`vaelii_llm._transport.boundary.DEFAULT_MAX_BODY_BYTES`), so a
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
_UTF8_ERROR: Final = "sent an event that is not UTF-8"
_AFTER_DATA: Final = itemgetter(slice(6, None))
"""A ``data: `` line's value."""


class SSEEvent(msgspec.Struct, frozen=True, gc=False):
    """One dispatched event: its type, its joined data, and the last event id."""

    event: str
    data: str
    id: str | None = None


class SSEDecoder:
    """Turns chunks of an event stream into events.

    ``feed(chunk)`` returns the :class:`SSEEvent` values that chunk completed
    (often none, often several); :meth:`feed_frames` the same events as
    ``(type, data)`` byte pairs. ``feed(b"")`` marks the end of the stream
    and returns ``[]``, discarding an unfinished frame. Feeding after the end
    is a programming error (``RuntimeError``). A frame over
    ``max_event_bytes`` or an event that is not UTF-8 raises
    :class:`~vaelii_llm.errors.LLMBadResponse` naming ``label``; after that
    the decoder must not be fed again. ``names``: the event types met, by
    their ``event:`` line (at most 64), to share among the decoders of one far
    end, which names the same few on every stream: a new decoder then knows
    them at once, and hands each over as the one object it was met as.
    """

    __slots__ = (
        "_bom_checked",
        "_buf",
        "_clean",
        "_data",
        "_ended",
        "_event",
        "_frame_bytes",
        "_ids",
        "_label",
        "_last_id",
        "_max",
        "_names",
        "_skip_lf",
        "_valid",
    )

    def __init__(
        self,
        label: str = "the far end",
        max_event_bytes: int = MAX_EVENT_BYTES,
        names: dict[bytes, bytes] | None = None,
    ) -> None:
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
        self._ids: list[tuple[int, str]] = []  # this chunk's id lines: (next frame, id)
        self._valid = False  # the chunk's whole lines are known to be UTF-8
        self._clean = True  # no line of the unfinished frame is unchecked
        self._names = {} if names is None else names  # an event line -> its type

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that has not finished (0 at a frame boundary)."""
        return self._frame_bytes + len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[SSEEvent]:
        """Take the next chunk of the stream; return the events it completed."""
        last_id = self._last_id  # the id the chunk's first events carry
        frames = self.feed_frames(data)
        if not frames:
            return []
        ids = self._ids
        if not ids:
            return [SSEEvent(event.decode(), text.decode(), last_id) for event, text in frames]
        events: list[SSEEvent] = []
        marks = iter([*ids, (len(frames), last_id)])
        until, next_id = next(marks)
        for n, (event, text) in enumerate(frames):
            while n >= until:
                last_id = next_id
                until, next_id = next(marks)
            events.append(SSEEvent(event.decode(), text.decode(), last_id))
        return events

    def feed_frames(self, data: bytes | bytearray | memoryview) -> list[tuple[bytes, bytes]]:
        """:meth:`feed`, with each event as a ``(type, data)`` pair of bytes.

        For a backend that decodes the data itself (``msgspec`` takes bytes):
        nothing is decoded to ``str`` and no :class:`SSEEvent` is built. The
        type is ``b"message"`` when the frame names none; the last event id is
        kept (:meth:`feed` carries it) but not handed over. Both bytes are
        checked to be UTF-8, once per chunk when its lines are valid as a
        whole, else per event.
        """
        lines = self._take(data)
        if not lines:
            return []
        frames = self._frames(lines)
        if self._frame_bytes + len(self._buf) > self._max:
            self._refuse(self._buf)
        return frames

    def _start(self, data: bytes | bytearray | memoryview) -> bytes:
        """``data`` as bytes, without the half CRLF or the BOM the stream's
        earlier bytes left to drop; b"" when nothing is left to split."""
        if self._ended:
            raise RuntimeError("SSEDecoder.feed() called after the end of the stream")
        if not data:
            self._ended = True
            self._buf.clear()
            self._data = []
            self._event = None
            return b""
        data = bytes(data)
        if self._skip_lf:
            self._skip_lf = False
            if data[0] == _LF:
                data = data[1:]
        if not self._bom_checked:
            buf = self._buf
            if buf:  # a BOM's start came alone: the stream's opening bytes, joined
                data = bytes(buf) + data
                buf.clear()
            if len(data) < len(_BOM) and _BOM.startswith(data):
                buf += data
                return b""  # maybe the start of a BOM: wait for more
            data = data.removeprefix(_BOM)  # no copy when there is none
            self._bom_checked = True
        return data

    def _take(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Buffer ``data``; return the whole lines it completed (cap checked),
        with ``_valid`` saying whether they are UTF-8 as a whole (they are cut
        only at CR or LF, so each one is then too)."""
        if self._skip_lf or not self._bom_checked or not data or self._ended:
            data = self._start(data)
            if not data:
                return []
        elif type(data) is not bytes:
            data = bytes(data)
        # Only the new bytes are searched and split: the unfinished line in
        # ``buf`` is never scanned again, so one huge event costs its size.
        # Every line end is made an LF first (a CR is rare on these wires, and
        # splitting on one byte costs well under ``splitlines``); a CR ending
        # the chunk may be half a CRLF, whose LF the next chunk then drops.
        self._skip_lf = data[-1] == _CR
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        partial = lines.pop()  # the unfinished line (b"" when the chunk ends one)
        buf = self._buf
        held = len(buf)
        if lines and held:
            lines[0] = bytes(buf) + lines[0]
            buf.clear()
        buf += partial
        if not lines:
            if self._frame_bytes + len(buf) > self._max:
                self._refuse(buf)
            return []
        if self._frame_bytes + held + len(data) > self._max:
            self._check_cap(lines)  # rare: only a chunk that could hold an over-cap frame
        # One check for the chunk's whole lines (a view: no copy), and the held
        # head of the first one; a failure only means "check per event". The
        # frame carried in from earlier chunks must be known good too.
        try:
            str(memoryview(data)[: len(data) - len(partial)], "utf-8")
            if held:
                str(lines[0], "utf-8")
            self._valid = self._clean
        except UnicodeDecodeError:
            self._valid = False
        return lines

    def _frames(self, lines: list[bytes]) -> list[tuple[bytes, bytes]]:
        """The one line path: apply whole lines to the frame being built and
        return the events they dispatched.

        From the first frame boundary of the chunk, when its lines are known
        to be UTF-8, a run of whole frames in the shape a JSON API writes is
        taken in one step (:meth:`_regular`, or :meth:`_regular_data` for
        frames that name no type); everything else (the frame the
        chunk began in, the one it ends in, a stream of any other shape) is
        read a line at a time (:meth:`_by_line`).
        """
        held = self._frame_bytes
        if self._ids:
            self._ids = []
        frames: list[tuple[bytes, bytes]] = []
        regular = None
        if self._valid and len(lines) >= 2 * _REGULAR_AT_LEAST:
            try:
                start = lines.index(b"") + 1  # the first frame boundary
            except ValueError:
                start = len(lines)
            if start < len(lines) and lines[start].startswith(b"data: "):
                end = start + (len(lines) - start) // 2 * 2
                regular = self._regular_data(lines, start, end)
            else:
                end = start + (len(lines) - start) // 3 * 3
                regular = self._regular(lines, start, end)
        if regular is None:
            self._by_line(lines, frames)
        else:
            self._by_line(lines[:start], frames)
            frames += regular
            self._by_line(lines[end:], frames)
        # Whether the frame left unfinished is known to be UTF-8 (see _take).
        self._clean = self._valid or (not self._data and not self._event)
        self._frame_bytes = _unfinished_bytes(lines, held)
        return frames

    def _regular(
        self, lines: list[bytes], start: int, end: int
    ) -> list[tuple[bytes, bytes]] | None:
        """The frames of ``lines[start:end]`` when those lines are enough whole
        frames of exactly ``event: <type>``, ``data: <data>``, blank; else None.

        The lines are checked a column at a time (no Python step per line);
        each type met is kept by its line, an empty one as ``message``, so
        a frame costs no slicing of its type, and an event line already kept
        needs no check of its own."""
        if end - start < 3 * _REGULAR_AT_LEAST:
            return None
        events = lines[start:end:3]
        data = lines[start + 1 : end : 3]
        if any(lines[start + 2 : end : 3]) or not _each_starts(data, b"data: "):
            return None
        names = self._names  # only ``event: `` lines are kept: a line found there is one
        try:
            types = list(map(names.__getitem__, events))
        except KeyError:  # a line not met before (once per type a stream names)
            new = set(events).difference(names)
            if not _each_starts(list(new), b"event: "):
                return None
            if len(names) + len(new) > _NAMES_KEPT:
                return None  # more types than a decoder keeps
            for line in new:
                names[line] = line[7:] or _MESSAGE
            types = list(map(names.__getitem__, events))
        return list(zip(types, map(_AFTER_DATA, data), strict=True))

    def _regular_data(
        self, lines: list[bytes], start: int, end: int
    ) -> list[tuple[bytes, bytes]] | None:
        """:meth:`_regular` for frames of exactly ``data: <data>`` and a blank
        line, naming no type (the Chat Completions wire): each a ``message``."""
        if end - start < 2 * _REGULAR_AT_LEAST:
            return None
        data = lines[start:end:2]
        if any(lines[start + 1 : end : 2]) or not _each_starts(data, b"data: "):
            return None
        return list(zip(repeat(_MESSAGE), map(_AFTER_DATA, data)))

    def _by_line(self, lines: list[bytes], frames: list[tuple[bytes, bytes]]) -> None:
        """Apply ``lines`` one at a time, the two common fields tested first;
        append each event dispatched to ``frames`` (checked to be UTF-8 unless
        the chunk is known to be). No size accounting: ``_take`` has done it."""
        check = not self._valid
        data = self._data
        event = self._event
        name = self._names.get
        for line in lines:
            if not line:
                if data:
                    joined = data[0] if len(data) == 1 else b"\n".join(data)
                    if check:
                        self._check_utf8(event, joined)
                    frames.append((event or _MESSAGE, joined))
                    data = []
                event = None
            elif line.startswith(b"data: "):
                data.append(line[6:])
            elif line.startswith(b"event: "):
                event = name(line) or self._name(line)
            elif line[0] != _COLON:  # not a comment: the general field rule
                field, _, value = line.partition(b":")
                if value[:1] == b" ":
                    value = value[1:]
                if field == b"data":
                    data.append(value)
                elif field == b"event":
                    event = value
                elif field == b"id" and b"\0" not in value:
                    self._set_id(value, len(frames))
        self._data = data
        self._event = event

    def _name(self, line: bytes) -> bytes:
        """The type an ``event: `` line names (``message`` when empty), kept by
        its line (a stream names a handful; at most :data:`_NAMES_KEPT`)."""
        found = self._names.get(line)
        if found is None:
            found = line[7:] or _MESSAGE
            if len(self._names) < _NAMES_KEPT:
                self._names[line] = found
        return found

    def _set_id(self, value: bytes, at: int) -> None:
        """An ``id:`` line: the last event id, carried from the ``at``-th event on."""
        try:
            self._last_id = value.decode()
        except UnicodeDecodeError as exc:
            raise LLMBadResponse(self._label, _UTF8_ERROR, value) from exc
        self._ids.append((at, self._last_id))

    def _check_utf8(self, event: bytes | None, data: bytes) -> None:
        for part in (event or b"", data):
            if not _utf8(part):
                raise LLMBadResponse(self._label, _UTF8_ERROR, part)

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


def _each_starts(lines: list[bytes], prefix: bytes) -> bool:
    """Whether every one of ``lines`` (none holding CR or LF) starts with
    ``prefix``: joined by LF, each line after the first starts just after an
    LF, so counting ``LF + prefix`` counts them (two C calls, no Python step
    per line)."""
    joined = b"\n".join(lines)
    return joined.startswith(prefix) and joined.count(b"\n" + prefix) == len(lines) - 1


def _utf8(data: bytes | memoryview) -> bool:
    try:
        str(data, "utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _unfinished_bytes(lines: list[bytes], held: int) -> int:
    """The unfinished frame's size after ``lines``: its lines at their end,
    plus the ``held`` bytes it had before them when no blank line came."""
    tail = 0
    for line in reversed(lines):
        if not line:
            return tail
        tail += len(line) + 1
    return tail + held


Frame = tuple[bytes, bytes]
"""One event as :meth:`SSEDecoder.feed_frames` hands it over: its type and data."""

OPENING_KEPT: Final = 64 * 1024
"""How much of a streamed answer that holds no event is kept for its refusal:
a gateway's JSON error or a proxy's HTML page, recognisable from its opening."""


class SSEFrames:
    """An :class:`SSEDecoder`'s frames as an HTTP stream pump feeds it, keeping,
    until the first event, the body's opening: a streamed answer in which no
    event ever came (a JSON error, a proxy's HTML page) ends in
    ``refuse(opening, label)``, the backend's own reading of what was sent.
    ``names``: see :class:`SSEDecoder`."""

    __slots__ = ("_decoder", "_label", "_opening", "_refuse")

    def __init__(
        self,
        label: str,
        refuse: Callable[[bytes, str], Exception],
        names: dict[bytes, bytes] | None = None,
    ) -> None:
        self._label = label
        self._refuse = refuse
        self._decoder = SSEDecoder(label, names=names)
        self._opening: bytearray | None = bytearray()  # kept until the first event

    def feed(self, data: bytes) -> list[Frame]:
        """The frames ``data`` completed; ``b""`` marks the end of the body."""
        frames = self._decoder.feed_frames(data)
        opening = self._opening
        if opening is not None:
            if frames:
                self._opening = None
            elif not data:
                if opening:
                    raise self._refuse(bytes(opening), self._label)
            elif len(opening) < OPENING_KEPT:
                opening += data[: OPENING_KEPT - len(opening)]
        return frames
