"""The NDJSON decoder: whole lines at any split, the rule for a line that will
not decode, hostile bytes, caps, linear cost.

The decoder frames; what a backend does with each line (decode it with its
typed decoder, skip an empty one, else :func:`refuse_line`) is :func:`decode`
here, so each test reads the values a backend would."""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.support.hypothesis_helpers import recursive
from vaelii_llm._wire import MAX_EVENT_BYTES
from vaelii_llm._wire import NDJSONDecoder
from vaelii_llm._wire.ndjson import refuse_line
from vaelii_llm.errors import LLMBadResponse

ANY: msgspec.json.Decoder[Any] = msgspec.json.Decoder()


class Chunk(msgspec.Struct):
    done: bool
    text: str = ""


def values_of(
    stream: NDJSONDecoder, data: bytes, decoder: msgspec.json.Decoder[Any] = ANY
) -> list[Any]:
    """What ``data`` completed, decoded line by line as a backend does."""
    values: list[Any] = []
    for line in stream.feed(data):
        try:
            values.append(decoder.decode(line))
        except Exception as exc:
            if line:
                refuse_line(stream_label, line, exc)
    return values


stream_label = "Test stream"


def decode(
    *chunks: bytes,
    decoder: msgspec.json.Decoder[Any] = ANY,
    max_line_bytes: int = MAX_EVENT_BYTES,
) -> list[Any]:
    stream = NDJSONDecoder(stream_label, max_line_bytes)
    values: list[Any] = []
    for chunk in (*(c for c in chunks if c), b""):
        values.extend(values_of(stream, chunk, decoder))
    return values


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    pieces, last = [], 0
    for point in points:
        pieces.append(data[last:point])
        last = point
    pieces.append(data[last:])
    return pieces


OLLAMA = (
    b'{"done": false, "text": "caf\xc3\xa9"}\n'
    b'{"done": false, "text": " \xe2\x9c\x93"}\n'
    b'{"done": true}\n'
)


def test_typed_values_line_by_line() -> None:
    typed = msgspec.json.Decoder(Chunk)
    assert decode(OLLAMA, decoder=typed) == [
        Chunk(done=False, text="café"),
        Chunk(done=False, text=" ✓"),
        Chunk(done=True),
    ]


def test_one_byte_at_a_time_gives_the_same_values() -> None:
    assert decode(*(OLLAMA[i : i + 1] for i in range(len(OLLAMA)))) == decode(OLLAMA)


def test_blank_lines_crlf_and_a_last_line_without_lf() -> None:
    assert decode(b'\n{"a": 1}\r\n\r\n  \n[2]\n3') == [{"a": 1}, [2], 3]


def test_end_of_stream_returns_the_last_line_and_then_refuses_more() -> None:
    stream = NDJSONDecoder()
    assert stream.feed(b"1\n\r\n2") == [b"1", b"\r"]
    assert stream.buffered == 1
    assert stream.feed(b"") == [b"2"]
    with pytest.raises(RuntimeError):
        stream.feed(b"3\n")
    ended = NDJSONDecoder()
    assert ended.feed(b"1\n") == [b"1"]
    assert ended.feed(b"") == [b""]  # nothing after the last LF: an empty line, skipped


def test_a_blank_line_is_skipped_and_any_other_refused_by_one_rule() -> None:
    for blank in (b" ", b"\r", b" \t\r"):
        refuse_line("t", blank, ValueError("no value"))  # skipped: no raise
    with pytest.raises(LLMBadResponse, match="not the expected JSON") as info:
        refuse_line("t", b"<html>", ValueError("no value"))
    assert info.value.text == "<html>"


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (b"<html>not json</html>", "DecodeError"),
        (b'{"done": "yes"}', "ValidationError"),
        # msgspec before 0.23 raises UnicodeDecodeError for bytes not UTF-8
        (b'{"text": "\xff\xfe"}', "DecodeError|UnicodeDecodeError"),
        (b"[" * 100_000, "RecursionError"),
        (b'{"done": tr', "DecodeError"),
        (b"1 2", "DecodeError"),
    ],
)
def test_a_line_that_will_not_decode(line: bytes, cause: str) -> None:
    typed = msgspec.json.Decoder(Chunk | list[Any] | int)
    with pytest.raises(LLMBadResponse) as info:
        decode(b'{"done": false}\n' + line + b"\n", decoder=typed)
    assert type(info.value.__cause__).__name__ in cause.split("|")
    assert info.value.text == line.decode("utf-8", "replace")
    assert len(str(info.value)) < 450


def test_a_value_spanning_two_lines_is_refused() -> None:
    with pytest.raises(LLMBadResponse):
        decode(b'{"a":\n 1}\n')


def test_a_line_over_the_cap_is_refused_whole_or_growing() -> None:
    with pytest.raises(LLMBadResponse) as info:
        decode(b'"' + b"x" * 2000 + b'"\n', max_line_bytes=1024)
    assert "1024-byte cap" in str(info.value)
    assert len(info.value.text) <= 4096
    stream = NDJSONDecoder(max_line_bytes=1024)
    stream.feed(b'"' + b"x" * 1000)
    with pytest.raises(LLMBadResponse):
        stream.feed(b"x" * 100)


def test_a_huge_line_is_searched_once_and_grows_in_place() -> None:
    """Linear cost in the bytes fed, counted rather than timed: each fed byte is
    searched for LF once (never the unfinished line again), and the unfinished
    line grows in one buffer (no copy of it per chunk). The figures are the
    benchmark's (tests/bench/bench_wire.py)."""
    searched = 0

    class Counted(bytes):
        def split(self, sep: Any = None, maxsplit: int = -1) -> list[bytes]:
            nonlocal searched
            searched += len(self)
            return super().split(sep, maxsplit)

    body = b'"' + b"x" * (4 * 2**20) + b'"\n'
    stream = NDJSONDecoder()
    held = stream._buf
    lines: list[bytes] = []
    for i in range(0, len(body), 4096):
        lines += stream.feed(Counted(body[i : i + 4096]))
        assert stream._buf is held
    assert searched == len(body)
    assert lines == [body[:-1]]
    assert stream.buffered == 0


# --- properties ---------------------------------------------------------------

_json = recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(_json, max_size=8),
    eols=st.lists(st.sampled_from([b"\n", b"\r\n", b"\n\n", b"\n \n"]), min_size=1, max_size=3),
    final_eol=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_any_split_of_a_valid_stream_gives_the_same_values(
    values: list[Any], eols: list[bytes], final_eol: bool, cuts: list[int]
) -> None:
    lines = [msgspec.json.encode(v) for v in values]
    stream = b"".join(line + eols[n % len(eols)] for n, line in enumerate(lines))
    if lines and not final_eol:
        stream = stream.rstrip(b"\r\n ")
    assert decode(stream) == values
    assert decode(*split_at(stream, cuts)) == values


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=600)
    | st.lists(
        st.sampled_from([b"{", b"}", b"[", b"]", b'"', b"1", b",", b":", b"\n", b"\r", b"\xff"]),
        max_size=60,
    ).map(b"".join),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=8),
)
def test_random_bytes_raise_only_the_typed_error(data: bytes, cuts: list[int]) -> None:
    typed = msgspec.json.Decoder(Chunk)
    with contextlib.suppress(LLMBadResponse):
        decode(*split_at(data, cuts), decoder=typed, max_line_bytes=256)
