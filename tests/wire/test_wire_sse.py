"""The SSE decoder: WHATWG rules, any split, hostile bytes, caps and linear cost."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from vaelii_llm._wire import MAX_EVENT_BYTES
from vaelii_llm._wire import SSEDecoder
from vaelii_llm._wire import SSEEvent
from vaelii_llm._wire.sse import _each_starts
from vaelii_llm.errors import LLMBadResponse


def decode(*chunks: bytes, max_event_bytes: int = MAX_EVENT_BYTES) -> list[SSEEvent]:
    decoder = SSEDecoder("Test stream", max_event_bytes)
    events: list[SSEEvent] = []
    for chunk in (*(c for c in chunks if c), b""):
        events.extend(decoder.feed(chunk))
    return events


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    pieces, last = [], 0
    for point in points:
        pieces.append(data[last:point])
        last = point
    pieces.append(data[last:])
    return [p for p in pieces if p]


ANTHROPIC = (
    b"event: message_start\n"
    b'data: {"type":"message_start","message":{"id":"msg_1","content":[]}}\n\n'
    b"event: ping\n"
    b'data: {"type": "ping"}\n\n'
    b": a comment\n\n"
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","delta":{"text":"caf\xc3\xa9 \xe2\x9c\x93"}}\n\n'
    b"event: message_stop\n"
    b'data: {"type":"message_stop"}\n\n'
)


def test_a_messages_api_transcript() -> None:
    events = decode(ANTHROPIC)
    assert [e.event for e in events] == [
        "message_start",
        "ping",
        "content_block_delta",
        "message_stop",
    ]
    assert "café ✓" in events[2].data


def test_one_byte_at_a_time_gives_the_same_events() -> None:
    whole = decode(ANTHROPIC)
    assert decode(*(ANTHROPIC[i : i + 1] for i in range(len(ANTHROPIC)))) == whole


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_every_line_ending(eol: bytes) -> None:
    stream = eol.join([b"event: e", b"data: one", b"data: two", b"", b"data: three", b"", b""])
    assert decode(stream) == [SSEEvent("e", "one\ntwo"), SSEEvent("message", "three")]


def test_a_crlf_split_across_chunks_is_one_line_end() -> None:
    assert decode(b"data: a\r", b"\ndata: b\r\n\r\n") == [SSEEvent("message", "a\nb")]
    assert decode(b"data: a\r", b"\r") == [SSEEvent("message", "a")]


def test_field_rules() -> None:
    stream = (
        b"data:no space\n\n"  # the space after the colon is optional
        b"data:  two spaces\n\n"  # only one is dropped
        b"data\n\n"  # a field with no colon has an empty value
        b"event:\ndata: x\n\n"  # an empty event name is "message"
        b"retry: 10\nfoo: bar\ndata: y\n\n"  # unknown fields and retry are ignored
        b"event: only-event\n\n"  # no data: nothing is dispatched, and the type resets
        b"data: z\n\n"
    )
    assert decode(stream) == [
        SSEEvent("message", "no space"),
        SSEEvent("message", " two spaces"),
        SSEEvent("message", ""),
        SSEEvent("message", "x"),
        SSEEvent("message", "y"),
        SSEEvent("message", "z"),
    ]


def test_the_last_event_id_persists_and_an_id_with_nul_is_ignored() -> None:
    stream = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\x00x\ndata: c\n\nid\ndata: d\n\n"
    assert [e.id for e in decode(stream)] == ["1", "1", "1", ""]


def test_a_leading_bom_is_dropped_even_split() -> None:
    assert decode(b"\xef", b"\xbb", b"\xbfdata: x\n\n") == [SSEEvent("message", "x")]
    # Only the stream's first bytes: later, a BOM is part of a field name ("\ufeffdata").
    assert decode(b"\xef\xbb\xbfdata: x\n\n\xef\xbb\xbfdata: y\n\n") == [SSEEvent("message", "x")]


def test_an_unfinished_final_frame_is_discarded() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: done\n\ndata: cut") == [SSEEvent("message", "done")]
    assert decoder.buffered == len(b"data: cut")
    assert decoder.feed(b"") == []
    with pytest.raises(RuntimeError):
        decoder.feed(b"more")


def test_lines_split_on_bytes_not_unicode_line_breaks() -> None:
    text = "a\x1cb\u2028c\x85d"
    assert decode(f"data: {text}\n\n".encode()) == [SSEEvent("message", text)]


def test_invalid_utf8_is_a_bad_response() -> None:
    with pytest.raises(LLMBadResponse) as info:
        decode(b'data: {"t": "\xff\xfe"}\n\n')
    assert "Test stream" in str(info.value)
    assert info.value.text.startswith('{"t": ')
    assert len(str(info.value)) < 300


def test_an_event_over_the_cap_is_refused() -> None:
    with pytest.raises(LLMBadResponse) as info:
        decode(b"data: " + b"x" * 2000 + b"\n\n", max_event_bytes=1024)
    assert "1024-byte cap" in str(info.value)
    assert len(str(info.value)) < 350


@pytest.mark.parametrize("chunk", [1, 100, 10_000])
def test_a_line_that_never_ends_is_refused_once_over_the_cap(chunk: int) -> None:
    decoder = SSEDecoder("Test stream", max_event_bytes=4096)

    def pump() -> None:
        for _ in range(10_000):
            decoder.feed(b"d" * chunk)

    with pytest.raises(LLMBadResponse):
        pump()
    assert decoder.buffered <= 4096 + chunk


def test_many_data_lines_count_towards_the_cap() -> None:
    with pytest.raises(LLMBadResponse) as info:
        decode(b"data: 0123456789\n" * 200, max_event_bytes=1024)
    assert info.value.text.startswith("data: 0123456789\ndata: 0123456789")


def test_pings_between_events_do_not_count_towards_an_event() -> None:
    pings = b": ping\n\n" * 1000
    assert decode(pings + b"data: x\n\n", max_event_bytes=64) == [SSEEvent("message", "x")]


def _time_one_event(size: int, chunk: int) -> float:
    body = b"data: " + b"x" * size + b"\n\n"
    decoder = SSEDecoder()
    start = time.process_time()  # this process's CPU: other processes' load does not count
    for i in range(0, len(body), chunk):
        events = decoder.feed(body[i : i + chunk])
    elapsed = time.process_time() - start
    assert len(events) == 1
    assert len(events[0].data) == size
    return elapsed


def test_one_huge_event_decodes_in_linear_time() -> None:
    """16 MiB in 4 KiB chunks: 4x the bytes of 4 MiB must not cost 16x (quadratic).

    A ratio of CPU times with a wide margin (linear is 4x, the bound 10x), no
    absolute bound: a loaded machine slows both alike. The figures themselves
    are the benchmark's (tests/bench/bench_wire.py)."""
    small = min(_time_one_event(4 * 2**20 - 16, 4096) for _ in range(3))
    big = min(_time_one_event(16 * 2**20 - 16, 4096) for _ in range(2))
    assert big < 10 * small + 0.05, (small, big)


# --- properties ---------------------------------------------------------------

_field_text = st.text(
    alphabet=st.characters(exclude_characters="\r\n", exclude_categories=["Cs"]), max_size=20
)
_event = st.tuples(
    _field_text.filter(lambda s: not s.startswith(" ")),  # the event name
    st.lists(_field_text, min_size=1, max_size=4),  # the data lines
    st.booleans(),  # a comment before it
)


def _encode(
    events: list[tuple[str, list[str], bool]], eols: list[bytes]
) -> tuple[bytes, list[SSEEvent]]:
    out: list[bytes] = []
    expected: list[SSEEvent] = []
    for n, (name, lines, comment) in enumerate(events):
        eol = eols[n % len(eols)]
        if comment:
            out.append(b": keep-alive" + eol)
        if name:
            out.append(b"event: " + name.encode() + eol)
        out.extend(b"data: " + line.encode() + eol for line in lines)
        out.append(eol)
        expected.append(SSEEvent(name or "message", "\n".join(lines)))
    return b"".join(out), expected


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(_event, max_size=8),
    eols=st.lists(st.sampled_from([b"\n", b"\r", b"\r\n"]), min_size=1, max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_any_split_of_a_valid_stream_gives_the_same_events(
    events: list[tuple[str, list[str], bool]], eols: list[bytes], cuts: list[int]
) -> None:
    stream, expected = _encode(events, eols)
    assert decode(stream) == expected
    assert decode(*split_at(stream, cuts)) == expected


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=600)
    | st.lists(
        st.sampled_from(
            [b"data: ", b"event: ", b"id: ", b":", b"\r", b"\n", b"\r\n", b"\xff", b"\xc3", b"x"]
        ),
        max_size=60,
    ).map(b"".join),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=8),
)
def test_random_bytes_raise_only_the_typed_error(data: bytes, cuts: list[int]) -> None:
    try:
        events = decode(*split_at(data, cuts), max_event_bytes=256)
    except LLMBadResponse:
        return
    assert all(isinstance(e, SSEEvent) for e in events)


# --- the reference: the rules a line at a time, the whole stream at once ----------

Event = tuple[bytes, bytes, str | None]


def _utf8(part: bytes) -> bool:
    try:
        part.decode()
    except UnicodeDecodeError:
        return False
    return True


def reference(stream: bytes, cap: int) -> tuple[list[Event], tuple[str, bytes] | None]:
    """The events of ``stream`` as the module docstring's rules read it, a line
    at a time, and the refusal that ends it, if any (``("utf8", part)`` for the
    part that is not UTF-8, ``("cap", b"")`` for a frame over ``cap`` bytes,
    each line counted with its line end, an unfinished last line as it is).

    The decoder's own line path must agree with it at any split (slow and
    obviously the rules: nothing here is tuned)."""
    stream = stream.removeprefix(b"\xef\xbb\xbf")
    *lines, unfinished = re.split(rb"\r\n|\r|\n", stream)
    events: list[Event] = []
    data: list[bytes] = []
    event: bytes | None = None
    last_id: str | None = None
    size = 0
    for line in lines:
        if not line:
            if data:
                joined = b"\n".join(data)
                for part in (event or b"", joined):
                    if not _utf8(part):
                        return events, ("utf8", part)
                events.append((event or b"message", joined, last_id))
            data, event, size = [], None, 0
            continue
        size += len(line) + 1
        if size > cap:
            return events, ("cap", b"")
        if line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event = value
        elif name == b"id" and b"\0" not in value:
            if not _utf8(value):
                return events, ("utf8", value)
            last_id = value.decode()
    if size + len(unfinished) > cap:
        return events, ("cap", b"")
    return events, None


SHARED_NAMES: dict[bytes, bytes] = {}
"""The event types every example's shared decoder has met: as a backend's
decoders share them, here across all examples (so it fills to its bound)."""


def run(
    stream: bytes,
    cuts: list[int],
    cap: int,
    frames: bool,
    names: dict[bytes, bytes] | None = None,
) -> tuple[list[Event], Any]:
    """What the decoder hands over for ``stream`` cut at ``cuts``, through
    ``feed_frames`` (ids as None) or ``feed``, and its refusal, if any;
    ``names``: the event types it shares with other decoders."""
    decoder = SSEDecoder("t", max_event_bytes=cap, names=names)
    out: list[Event] = []
    try:
        for piece in [*split_at(stream, cuts), b""]:
            if frames:
                out.extend((e, d, None) for e, d in decoder.feed_frames(piece))
            else:
                out.extend((e.event.encode(), e.data.encode(), e.id) for e in decoder.feed(piece))
    except LLMBadResponse as exc:
        return out, exc
    return out, None


def check_against_reference(stream: bytes, cuts: list[int], cap: int) -> None:
    """Both entry points, at this split, against the reference: the same events,
    or, when refused, a prefix of them and a refusal (the same one, word for
    word, when it cannot depend on the split: not UTF-8, no cap in play)."""
    expected, refusal = reference(stream, cap)
    for frames, names in ((False, None), (True, None), (True, SHARED_NAMES)):
        got, refused = run(stream, cuts, cap, frames, names)
        want = [(e, d, None) for e, d, _ in expected] if frames else expected
        if refusal is None:
            assert refused is None
            assert got == want
            continue
        assert refused is not None
        assert got == want[: len(got)]
        if refusal[0] == "utf8" and cap >= len(stream):
            assert refused.reason == "sent an event that is not UTF-8"
            assert refused.text == refusal[1].decode("utf-8", "replace")
        elif refusal[0] == "cap" and cap < 64:  # nothing else can come first
            assert "cap" in refused.reason


ATOMS = [
    b"data: ",
    b"event: ",
    b"id: ",
    b":",
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"x",
    b"\xc3\xbc",
    b"\xc3",
    b"\xbc",
    b"\xff",
    b"\xef\xbb\xbf",
    b"data:",
    b"event:e\xff\n",
    b"\0",
    b" ",
    b"ping",
    b"message_stop",
    b"{}",
    b"data: \xe2\x80\x94\n\n",
]


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.sampled_from(ATOMS) | st.binary(max_size=6), max_size=40),
    st.lists(st.integers(0, 300), max_size=8),
    st.sampled_from([4, 16, 64, 10**6]),
)
def test_any_split_of_any_bytes_agrees_with_the_reference(
    atoms: list[bytes], cuts: list[int], cap: int
) -> None:
    check_against_reference(b"".join(atoms), cuts, cap)


FRAME_LINES = [
    b"event: content_block_delta",
    b"event: ping",
    b"event: ",
    b"event:x",
    b"data: {}",
    b'data: {"a":"\xc3\xbc"}',
    b"data:",
    b"data",
    b": comment",
    b"id: 7",
    b"id: \xff",
    b"retry: 1",
    b"other: 2",
    b"data: \xff",
]

_REGULAR_FRAME = st.builds(
    lambda name, data: [b"event: " + name, b"data: " + data],
    st.sampled_from([b"content_block_delta", b"ping", b"message_stop", b""])
    | st.sampled_from([b"", b"x"])
    | st.integers(0, 90).map(lambda n: b"e%d" % n),
    st.sampled_from([b"{}", b'{"a":"\xc3\xbc"}', b"", b"x y", b"data: z", b"\xff"]),
)
_ODD_FRAME = st.lists(
    st.sampled_from(FRAME_LINES).map(lambda line: [line]) | _REGULAR_FRAME, min_size=1, max_size=3
).map(lambda pieces: [line for piece in pieces for line in piece])
"""A frame of another shape: lines of any field, regular pairs among them."""


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.one_of(*[_REGULAR_FRAME] * 40, _ODD_FRAME), max_size=80),
    st.sampled_from([b"\n", b"\n", b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(0, 4000), max_size=24),
    st.sampled_from([64, 10**6]),
)
@example(  # a frame of the regular length whose first line is no event line
    [[b"event: a", b"data: 1"]] * 5
    + [[b": comment", b"data: {}"]]
    + [[b"event: b", b"data: 2"]] * 5,
    b"\n",
    [],
    10**6,
)
@example([[b"id: 1", b"data: a"], [b"event: e", b"data: b"]] * 8, b"\n", [], 10**6)
@example([[b"event: ", b"data: a"]] * 6, b"\n", [17], 10**6)  # an empty type, by line first
def test_runs_of_frames_as_a_json_api_writes_them_agree_with_the_reference(
    frames: list[list[bytes]], end: bytes, cuts: list[int], cap: int
) -> None:
    """Runs of frames in the one shape a JSON API writes (which the decoder
    takes a run at a time), broken by frames of other shapes (comments, ids,
    other fields), an empty type, more types than the decoder keeps, a frame
    over the cap or not UTF-8: the reference's events, at any split."""
    stream = b"".join(end.join(lines) + end + end for lines in frames)
    check_against_reference(stream, cuts, cap)


@given(st.lists(_event, max_size=8), st.lists(st.integers(0, 2000), max_size=12))
@settings(max_examples=200, deadline=None)
def test_the_reference_reads_what_the_encoder_wrote(
    events: list[tuple[str, list[str], bool]], cuts: list[int]
) -> None:
    """The reference itself against streams of known events (so the agreement
    above is with the rules, not with a shared mistake)."""
    stream, expected = _encode(events, [b"\n", b"\r\n"])
    got, refusal = reference(stream, 10**6)
    assert refusal is None
    assert [SSEEvent(e.decode(), d.decode(), i) for e, d, i in got] == expected
    check_against_reference(stream, cuts, 10**6)


_PIECES = st.sampled_from(
    [b"event: ", b"data: ", b"event:", b"data:", b"vent: ", b" ", b"x", b"\xff"]
)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.lists(_PIECES, max_size=4).map(b"".join), min_size=1, max_size=12),
    st.sampled_from([b"event: ", b"data: "]),
)
@example([b"event: a", b"x event: b"], b"event: ")  # the prefix inside a line, not at its start
@example([b"event: a", b""], b"event: ")
def test_a_column_of_lines_is_checked_as_each_line_would_be(
    lines: list[bytes], prefix: bytes
) -> None:
    """The one-step column check of a run of frames (lines joined, the prefix
    counted after each line end) says what ``startswith`` on each line says."""
    assert _each_starts(lines, prefix) == all(line.startswith(prefix) for line in lines)


def _json_api(n: int) -> bytes:
    frame = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0}\n\n'
    return frame * n


def test_a_json_api_stream_is_taken_a_run_of_frames_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The one-step run is what reads the shape every frame of the Messages
    API has, at any split (else the benchmark's figure would rest on nothing)."""
    taken: list[int] = []
    regular = SSEDecoder._regular

    def spy(self: SSEDecoder, lines: list[bytes], start: int, end: int) -> Any:
        found = regular(self, lines, start, end)
        taken.append(-1 if found is None else len(found))
        return found

    monkeypatch.setattr(SSEDecoder, "_regular", spy)
    stream = _json_api(40)
    decoder = SSEDecoder("t")
    events = [
        event
        for at in range(0, len(stream), 2000)
        for event in decoder.feed_frames(stream[at : at + 2000])
    ]
    assert len(events) == 40
    assert -1 not in taken
    assert sum(taken) > 30  # all but the frames a chunk begins or ends in


_DATA_FRAME = st.sampled_from(
    [b"{}", b'{"a":"\xc3\xbc"}', b"", b"x y", b"[DONE]", b"data: z", b"\xff"]
).map(lambda data: [b"data: " + data])
"""A frame as the Chat Completions wire writes it: one data line, no type."""


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.one_of(*[_DATA_FRAME] * 40, _ODD_FRAME), max_size=80),
    st.sampled_from([b"\n", b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(0, 4000), max_size=24),
    st.sampled_from([64, 10**6]),
)
@example([[b"data: 1"]] * 5 + [[b": comment", b"data: {}"]] + [[b"data: 2"]] * 5, b"\n", [], 10**6)
@example([[b"data: a", b"data: b"]] * 6 + [[b"data: c"]] * 6, b"\n", [], 10**6)
def test_runs_of_untyped_data_frames_agree_with_the_reference(
    frames: list[list[bytes]], end: bytes, cuts: list[int], cap: int
) -> None:
    """Runs of ``data:``-only frames (taken a run at a time), broken by frames
    of other shapes: the reference's events, at any split."""
    stream = b"".join(end.join(lines) + end + end for lines in frames)
    check_against_reference(stream, cuts, cap)


def test_decoders_sharing_names_hand_over_one_object_per_type() -> None:
    """A second stream's decoder knows the types the first one met: its
    frames carry the very objects the first one's did (what the Messages
    API's assembler tells a delta by), whatever the split."""
    names: dict[bytes, bytes] = {}
    stream = _sse_frames(40)
    first = SSEDecoder("t", names=names).feed_frames(stream)
    second = SSEDecoder("t", names=names)
    later = [
        e for at in range(0, len(stream), 700) for e in second.feed_frames(stream[at : at + 700])
    ]
    assert later == first
    assert {id(event) for event, _ in first} == {id(event) for event, _ in later}
    assert len({id(event) for event, _ in later}) == 2


def _sse_frames(n: int) -> bytes:
    start = b'event: message_start\ndata: {"type":"message_start"}\n\n'
    return start + _json_api(n)


def test_a_chat_completions_stream_is_taken_a_run_of_frames_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken: list[int] = []
    regular = SSEDecoder._regular_data

    def spy(self: SSEDecoder, lines: list[bytes], start: int, end: int) -> Any:
        found = regular(self, lines, start, end)
        taken.append(-1 if found is None else len(found))
        return found

    monkeypatch.setattr(SSEDecoder, "_regular_data", spy)
    stream = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n' * 40
    stream += b"data: [DONE]\n\n"
    decoder = SSEDecoder("t")
    events = [
        event
        for at in range(0, len(stream), 2000)
        for event in decoder.feed_frames(stream[at : at + 2000])
    ]
    assert len(events) == 41
    assert events[-1] == (b"message", b"[DONE]")
    assert -1 not in taken
    assert sum(taken) > 30  # all but the frames a chunk begins or ends in
