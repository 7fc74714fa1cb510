"""Where one small whole turn's client CPU goes, wire by wire, against the floor.

For each wire (Ollama, Chat Completions, the Messages API) the wire's own
bench serves pre-encoded small answers from a process of its own
(``--serve``), and this process runs small whole turns at concurrency 32:

* CPU per turn: ``time.process_time`` over a batch of turns, ours and the
  floor (the wire bench's ``floor_small``: a plain aiohttp POST, the body
  decoded by one typed msgspec decoder) in turn, order alternating; medians
  of the rounds, and the median of the rounds' ratios;
* the cost table: one more batch of ours under ``cProfile``, each function's
  own time put in the phase its file and name belong to (:data:`PHASES`, the
  first rule that matches), the shares then scaled to the measured CPU per
  turn. The profiler weighs small functions more than it should, so a row is
  a place to look and a before/after of the same row is the figure to quote,
  never one row alone.

* the required work, one piece at a time: CPU per turn of ours with one
  piece of what a turn must do (build the request from a Request, read
  Ollama's switches, check the kept connection, run the deadline, take the
  gate, build the Usage and Response, check the counts, capture headers)
  replaced by nothing (or, for what a turn makes, by what the first turn
  made), alternating with the unpatched turn, and then with all of them
  replaced at once: what is left beside the floor is the skeleton's own
  cost. The patched turns are for measuring only, never a way to run. One
  row moves by a few µs from run to run (the pieces are small beside the
  noise); the last row, all of them at once, is the figure to quote.

Run: ``.venv/bin/python tests/bench/bench_turn_costs.py [--turns 1024] [--rounds 5]``
(about two minutes a wire). Quote it on a quiet machine, with the load it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parents[1]))  # the repository: tests.support

CONCURRENCY = 32
WITHOUT_TURNS = 4
"""The required-work table runs this many times ``--turns`` a row: its
pieces are a few µs each, so each row needs more turns than the rest."""

PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("telemetry (off)", ("vaelii_llm/telemetry/__init__.py",)),
    (
        "switch and credential reads",
        (
            "vaelii_llm/_switches.py",
            "vaelii_llm/config.py",
            "_key.py",
            "_credentials.py",
            "vaelii_llm/_backends.py",
        ),
    ),
    (
        "request building and encoding",
        (
            "_chat.py:chat_body",
            "_encode.py",
            "_request.py",
            "_codec.py:body",
            "_chat.py:body",
            "_http.py:_body",
            "_http.py:_turn_headers",
            "_http.py:_headers",
        ),
    ),
    (
        "deadline and timers",
        (
            "vaelii_llm/_timers.py",
            "settings.py:after_ms",
            "boundary.py:__enter__",
            "boundary.py:__exit__",
            "boundary.py:__init__",
        ),
    ),
    ("connection checkout", ("_transport/sessions.py", "aiohttp/connector.py")),
    (
        "sending",
        (
            "aiohttp/client_reqrep.py:send",
            "aiohttp/http_writer.py",
            "aiohttp/client_reqrep.py:__init__",
            "aiohttp/client_reqrep.py:update_",
            "aiohttp/client_reqrep.py:write_bytes",
            "aiohttp/payload.py",
            "aiohttp/helpers.py",
        ),
    ),
    (
        "the head",
        (
            "aiohttp/client_proto.py",
            "aiohttp/http_parser.py",
            "aiohttp/client_reqrep.py:start",
            "multidict",
        ),
    ),
    (
        "header capture",
        (
            "settings.py:read",
            "_http.py:_with_headers",
            "_http.py:_header_rule",
            "_transport/withheld.py",
            "_http.py:_answered_in",
        ),
    ),
    (
        "body read and decode",
        ("boundary.py:_read_whole", "aiohttp/streams.py", "send.py", "msgspec"),
    ),
    (
        "Usage and Response",
        (
            "_assemble.py",
            "anthropic/_decode.py",
            "vaelii_llm/_protocol.py",
            "_http.py:_check_usage",
        ),
    ),
    ("the rest of the turn (skeleton)", ("vaelii_llm/",)),
    ("aiohttp, the rest", ("aiohttp/",)),
    (
        "asyncio's loop",
        ("asyncio/", "selectors.py", "<built-in method select", "_contextvars", "{method 'run' of"),
    ),
)
"""Each phase of a turn and the places (``file`` fragments, or
``file:function`` prefixes) whose own time is counted in it, first rule first."""


def phase_of(file: str, function: str) -> str:
    place = f"{file}:{function}"
    for phase, rules in PHASES:
        for rule in rules:
            if ":" in rule:
                where, _, name = rule.partition(":")
                if where in file and function.startswith(name):
                    return phase
            elif rule in place:
                return phase
    return "other (the interpreter, the kernel's calls)"


def cost_table(profile: cProfile.Profile) -> dict[str, float]:
    """Own time by phase, as shares of the whole."""
    stats = pstats.Stats(profile)
    totals: dict[str, float] = {}
    for (file, _line, function), row in stats.stats.items():  # type: ignore[attr-defined]
        own = row[2]
        phase = phase_of(file.replace(os.sep, "/"), function)
        totals[phase] = totals.get(phase, 0.0) + own
    whole = sum(totals.values()) or 1.0
    return {phase: own / whole for phase, own in totals.items()}


Patch = Callable[[], contextlib.AbstractContextManager[None]]
"""A piece of a turn's work left out while the context lasts."""


@contextlib.contextmanager
def _patched(owner: object, name: str, value: object) -> Iterator[None]:
    kept = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, kept)


def _made_once(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` answering every call with what its first call with the same owner made."""
    made: dict[tuple[int, object], Any] = {}

    def once(owner: object, first: object, **options: Any) -> Any:
        key = (id(owner), tuple(options.items()))
        if key not in made:
            made[key] = function(owner, first, **options)
        return made[key]

    return once


class _NoTimer:
    """A deadline block that never fires (the deadline piece left out)."""

    def __init__(self, _when: float) -> None:
        pass

    def __enter__(self) -> _NoTimer:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def expired(self) -> bool:
        return False

    def reschedule(self, _when: float) -> None:
        pass


def required_work(
    provider: Any,
) -> dict[str, Callable[[], contextlib.AbstractContextManager[None]]]:
    """Each piece of a turn's required work, as a patch that leaves it out."""
    from types import SimpleNamespace

    from vaelii_llm import _backends
    from vaelii_llm._transport import boundary
    from vaelii_llm._transport import sessions
    from vaelii_llm.providers import _http

    codec = type(provider._codec)
    pieces: dict[str, Patch] = {
        "request building (the body from a Request)": lambda: _patched(
            _http.HTTPProvider, "_body", _made_once(_http.HTTPProvider._body)
        ),
        "Usage and Response building": lambda: _patched(codec, "whole", _made_once(codec.whole)),
        "kept-connection check": lambda: _patched(
            sessions._FreshConnector, "connect", aiohttp.TCPConnector.connect
        ),
        "deadline": lambda: _patched(boundary, "timers", SimpleNamespace(timeout_at=_NoTimer)),
        "connection gate": lambda: _gate_left_out(sessions.Gate),
        "usage bounds check": lambda: _patched(_http, "_check_usage", lambda *_: None),
        "header capture": lambda: _patched(_http, "_with_headers", lambda r, *_: r),
    }
    if provider._codec.endpoint.slug == "ollama":
        pieces["switch reads (two a turn)"] = lambda: _switches_left_out(_backends)
    return pieces


@contextlib.contextmanager
def _gate_left_out(gate: Any) -> Iterator[None]:
    with _patched(gate, "take_now", lambda _self: True), _patched(gate, "give", lambda _self: None):
        yield


@contextlib.contextmanager
def _switches_left_out(backends: Any) -> Iterator[None]:
    num_ctx, keep_alive = backends.ollama_num_ctx(), backends.ollama_keep_alive()
    with (
        _patched(backends, "ollama_num_ctx", lambda explicit=None: explicit or num_ctx),
        _patched(backends, "ollama_keep_alive", lambda explicit=None: explicit or keep_alive),
    ):
        yield


@contextlib.contextmanager
def _all_of(pieces: list[Patch]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for piece in pieces:
            stack.enter_context(piece())
        yield


async def without_table(
    provider: Any,
    ours: Callable[[], Awaitable[object]],
    floor: Callable[[], Awaitable[object]],
    turns: int,
    rounds: int,
) -> None:
    """CPU per turn with each piece of the required work left out, and all at once."""
    pieces = required_work(provider)
    rows = {"(nothing left out)": contextlib.nullcontext, **pieces}
    rows["all of the above"] = lambda: _all_of(list(pieces.values()))
    runs: dict[str, list[float]] = {name: [] for name in rows}
    least: list[float] = []
    for n in range(rounds):
        for name in list(rows) if n % 2 else list(reversed(rows)):
            with rows[name]():
                runs[name].append(await cpu_per_turn(ours, turns))
        least.append(await cpu_per_turn(floor, turns))
    whole = statistics.median(runs["(nothing left out)"])
    floor_us = statistics.median(least) * 1e6
    print(f"  {'left out':<44} {'ours us':>8} {'saves us':>9} {'ours/floor':>11}")
    for name, times in runs.items():
        mine = statistics.median(times)
        print(
            f"  {name:<44} {mine * 1e6:8.1f} {(whole - mine) * 1e6:9.1f} "
            f"{mine * 1e6 / floor_us:11.2f}"
        )


async def cpu_per_turn(turn: Callable[[], Awaitable[object]], turns: int) -> float:
    """Client CPU seconds per turn over ``turns`` turns at :data:`CONCURRENCY`."""
    per_worker = turns // CONCURRENCY

    async def worker() -> None:
        for _ in range(per_worker):
            await turn()

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return (time.process_time() - started) / (per_worker * CONCURRENCY)


async def measure(
    wire: str,
    ours: Callable[[], Awaitable[object]],
    floor: Callable[[], Awaitable[object]],
    turns: int,
    rounds: int,
    provider: Any,
) -> None:
    await cpu_per_turn(ours, turns)  # warm: connections made, code loaded
    await cpu_per_turn(floor, turns)
    mine: list[float] = []
    least: list[float] = []
    for n in range(rounds):
        for first in (True, False) if n % 2 else (False, True):
            (mine if first else least).append(await cpu_per_turn(ours if first else floor, turns))
    ratio = statistics.median(m / f for m, f in zip(mine, least, strict=True))
    ours_us = statistics.median(mine) * 1e6
    floor_us = statistics.median(least) * 1e6
    print(
        f"\n{wire}: CPU per small whole turn, ours {ours_us:.0f} us, floor {floor_us:.0f} us, "
        f"ours/floor x{ratio:.2f} (medians of {rounds} rounds of {turns} turns)"
    )
    tables = []
    for turn in (ours, floor):
        profile = cProfile.Profile()
        profile.enable()
        await cpu_per_turn(turn, turns)
        profile.disable()
        tables.append(cost_table(profile))
    print(f"  {'phase':<42} {'ours us':>8} {'floor us':>9} {'more us':>8}")
    for phase, share in sorted(tables[0].items(), key=lambda kv: -kv[1]):
        mine_us = share * ours_us
        least_us = tables[1].get(phase, 0.0) * floor_us
        print(f"  {phase:<42} {mine_us:8.1f} {least_us:9.1f} {mine_us - least_us:8.1f}")
    await without_table(provider, ours, floor, turns * WITHOUT_TURNS, rounds)


async def ollama_wire(url: str, turns: int, rounds: int) -> None:
    import bench_ollama as wire

    async with (
        wire.ours.provider(host=url, model=wire.MODEL) as p,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        await measure(
            "Ollama",
            lambda: wire.ours_small(p),
            lambda: wire.floor_small(session, url),
            turns,
            rounds,
            p,
        )


def _ask() -> Any:
    from vaelii_llm import Message
    from vaelii_llm import Request

    return Request(messages=[Message(role="user", content="hi")], timeout_ms=120_000)


async def openai_wire(url: str, turns: int, rounds: int) -> None:
    import bench_openai as wire

    from vaelii_llm.providers import openai

    body = msgspec.json.encode(
        {"model": wire.MODEL, "messages": [{"role": "user", "content": "hi"}]}
    )
    request = _ask()
    async with (
        openai.provider(base_url=url, api_key="sk-bench", model=wire.MODEL) as p,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        await measure(
            "Chat Completions",
            lambda: p.complete(request),
            lambda: wire.floor_small(session, url, body),
            turns,
            rounds,
            p,
        )


async def anthropic_wire(url: str, turns: int, rounds: int) -> None:
    import bench_anthropic as wire

    from vaelii_llm.providers import anthropic

    hi = [{"role": "user", "content": "hi"}]
    body = msgspec.json.encode({"model": wire.MODEL, "max_tokens": 1024, "messages": hi})
    request = _ask()
    async with (
        anthropic.provider(credential="sk-bench", base_url=url) as p,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        await measure(
            "Messages API",
            lambda: p.complete(request),
            lambda: wire.floor_small(session, url, body),
            turns,
            rounds,
            p,
        )


WIRES: tuple[tuple[list[str], Callable[[str, int, int], Awaitable[None]]], ...] = (
    ([sys.executable, "-m", "tests.support.fake_ollama"], ollama_wire),
    ([sys.executable, str(BENCH / "bench_openai.py"), "--serve"], openai_wire),
    ([sys.executable, str(BENCH / "bench_anthropic.py"), "--serve"], anthropic_wire),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {CONCURRENCY} turns at once")
    for argv, run in WIRES:
        server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            url = server.stdout.readline().strip()
            asyncio.run(run(url, args.turns, args.rounds))
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
