"""Throughput of the wire decoders against the least possible work on the same bytes.

Run: ``python tests/bench/bench_wire.py`` (about 10 s). For each wire it builds a
4 MB stream of text deltas, then times

- ``floor``: the whole stream split on LF in one call and each payload decoded
  with the same typed ``msgspec`` decoder in one tight loop: what no decoder
  can beat, since it needs the whole stream in memory at once and knows the
  framing in advance;
- ``decoder``: the same bytes fed to :class:`SSEDecoder` / :class:`NDJSONDecoder`
  in 64 KiB chunks (aiohttp's read size), each event's data (each line) then
  decoded by the typed decoder, as a backend does;
- ``decoder, 1 KiB``: the same with 1 KiB chunks (a slow far end, many feeds).

It prints the median of several runs, MB/s, and each ratio to the floor.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import msgspec

from vaelii_llm._wire import NDJSONDecoder
from vaelii_llm._wire import SSEDecoder

TARGET_BYTES = 4_000_000
RUNS = 15


class TextDelta(msgspec.Struct):
    type: str
    text: str


class BlockDelta(msgspec.Struct):
    type: str
    index: int
    delta: TextDelta


class ChatMessage(msgspec.Struct):
    role: str
    content: str


class ChatChunk(msgspec.Struct):
    model: str
    created_at: str
    message: ChatMessage
    done: bool


WORDS = ["the", " model", " answers", " café", " quickly", ",", " and", " ✓", " then", " stops."]


def sse_stream() -> bytes:
    frames: list[bytes] = []
    size = n = 0
    while size < TARGET_BYTES:
        payload = msgspec.json.encode(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": WORDS[n % 10]},
            }
        )
        frame = b"event: content_block_delta\ndata: " + payload + b"\n\n"
        if n % 200 == 0:
            frame += b'event: ping\ndata: {"type": "ping"}\n\n'
        frames.append(frame)
        size += len(frame)
        n += 1
    return b"".join(frames)


def ndjson_stream() -> bytes:
    lines: list[bytes] = []
    size = n = 0
    while size < TARGET_BYTES:
        line = msgspec.json.encode(
            {
                "model": "phi4:14b",
                "created_at": "2025-01-01T00:00:00.000000Z",
                "message": {"role": "assistant", "content": WORDS[n % 10]},
                "done": False,
            }
        )
        lines.append(line + b"\n")
        size += len(line) + 1
        n += 1
    return b"".join(lines)


def chunks_of(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def median_seconds(fn: Callable[[], int], expected: int) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        count = fn()
        times.append(time.perf_counter() - start)
        assert count == expected, (count, expected)
    return statistics.median(times)


def bench_sse(data: bytes) -> dict[str, float]:
    typed = msgspec.json.Decoder(BlockDelta)
    ping = msgspec.json.Decoder()

    def floor() -> int:
        count = 0
        kind = b""
        for line in data.split(b"\n"):
            if line.startswith(b"event: "):
                kind = line[7:]
            elif line.startswith(b"data: "):
                (typed if kind == b"content_block_delta" else ping).decode(line[6:])
                count += 1
        return count

    def decoder(size: int) -> Callable[[], int]:
        pieces = chunks_of(data, size)

        def run() -> int:
            stream = SSEDecoder()
            count = 0
            for piece in (*pieces, b""):
                for event in stream.feed(piece):
                    (typed if event.event == "content_block_delta" else ping).decode(event.data)
                    count += 1
            return count

        return run

    expected = floor()
    return {
        "floor": median_seconds(floor, expected),
        "decoder": median_seconds(decoder(65_536), expected),
        "decoder, 1 KiB": median_seconds(decoder(1024), expected),
    }


def bench_ndjson(data: bytes) -> dict[str, float]:
    typed = msgspec.json.Decoder(ChatChunk)

    def floor() -> int:
        count = 0
        for line in data.split(b"\n"):
            if line:
                typed.decode(line)
                count += 1
        return count

    def decoder(size: int) -> Callable[[], int]:
        pieces = chunks_of(data, size)

        def run() -> int:
            stream = NDJSONDecoder()
            decode = typed.decode
            count = 0
            for piece in (*pieces, b""):
                for line in stream.feed(piece):
                    if line:
                        decode(line)
                        count += 1
            return count

        return run

    expected = floor()
    return {
        "floor": median_seconds(floor, expected),
        "decoder": median_seconds(decoder(65_536), expected),
        "decoder, 1 KiB": median_seconds(decoder(1024), expected),
    }


def report(wire: str, size: int, times: dict[str, float]) -> None:
    print(f"{wire}: {size / 1e6:.1f} MB, median of {RUNS} runs")
    base = times["floor"]
    for name, seconds in times.items():
        print(
            f"  {name:<16} {seconds * 1000:8.1f} ms  {size / seconds / 1e6:7.1f} MB/s"
            f"  {seconds / base:5.2f}x floor"
        )


def main() -> None:
    sse = sse_stream()
    report("SSE (Messages API text deltas)", len(sse), bench_sse(sse))
    nd = ndjson_stream()
    report("NDJSON (Ollama chat chunks)", len(nd), bench_ndjson(nd))


if __name__ == "__main__":
    main()
