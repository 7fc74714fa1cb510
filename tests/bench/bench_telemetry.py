"""What telemetry costs a turn, a tool call and a vote: off against the code
without the hooks (the baseline), and on against off.

Run: ``.venv/bin/python tests/bench/bench_telemetry.py [--rounds 21] [--batch 2000]``

baseline
    the same path with no hook at all: the provider class's own ``complete``
    and ``stream`` (the turn itself, which the instance's instrumented ones
    run after their one-attribute check), ``Toolset._call`` and ``pool.vote``
    through ``__wrapped__`` (the undecorated functions);
off
    what a caller gets with telemetry off: the instance's ``complete`` and
    ``stream`` (see ``telemetry.instrument``), the decorated ``Toolset.call``
    and ``pool.vote``;
on
    the same provider after ``telemetry.enable`` with the real SDK: a tracer
    provider whose processor hands each span to an exporter that drops it, and
    a meter provider with an in-memory reader.

The stub answers without I/O, so a turn's own cost is the least it can be and
the hooks' share the largest it can be; a loopback Ollama turn (a real HTTP
round trip, the fake host in this process) shows the same with I/O. Each
figure is the median over ``--rounds`` rounds of a round's time divided by its
batch, and each ratio the median of the rounds' ratios; the variants
interleave within each round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncGenerator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.support

from tests.support.fake_ollama import FakeOllama
from vaelii_llm import kb
from vaelii_llm import pool
from vaelii_llm import telemetry
from vaelii_llm import tools
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import Usage
from vaelii_llm.providers import ollama
from vaelii_llm.providers import stub
from vaelii_llm.providers.stub import StubProvider

REQUEST = Request(messages=[Message(role="user", content="Is a spider an insect?")])
ANSWER = Response(
    content=[TextBlock(text="Yes.")],
    stop_reason="end_turn",
    model="stub",
    usage=Usage(input_tokens=10, output_tokens=2),
)
GOAL = {"goal": "(isa ?x Spider)"}


class Dropped(SpanExporter):
    """Exports nowhere: the SDK's span work is measured, not an exporter's I/O."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


Op = Callable[[], Awaitable[object]]


async def per_call(op: Op, batch: int) -> float:
    started = time.perf_counter()
    for _ in range(batch):
        await op()
    return (time.perf_counter() - started) / batch


Switch = Callable[[bool], None]


async def compare(
    label: str, baseline: Op, hooked: Op, rounds: int, batch: int, switch: Switch
) -> None:
    """Time ``baseline``, then ``hooked`` off, then ``hooked`` with
    ``switch(True)`` in force (on), interleaved round by round."""
    variants = {"baseline": baseline, "off": hooked, "on": hooked}
    seen: dict[str, list[float]] = {name: [] for name in variants}
    for warm_up in [True] + [False] * rounds:
        for name, op in variants.items():
            switch(name == "on")
            try:
                taken = await per_call(op, max(1, batch // 10) if warm_up else batch)
            finally:
                switch(False)
            if not warm_up:
                seen[name].append(taken)
    medians = {name: statistics.median(times) for name, times in seen.items()}
    shown = "  ".join(f"{name} {t * 1e6:8.2f} µs" for name, t in medians.items())
    # Each ratio is the median of the rounds' own ratios: a round's variants
    # ran back to back, so a burst of load elsewhere moves both sides of it.
    off_base = statistics.median(o / b for o, b in zip(seen["off"], seen["baseline"], strict=True))
    on_off = statistics.median(n / o for n, o in zip(seen["on"], seen["off"], strict=True))
    print(f"{label:<34} {shown}  off/baseline {off_base:.3f}×  on/off {on_off:.2f}×")


async def drain(items: AsyncGenerator[Any, None]) -> None:
    async with aclosing(items) as open_items:
        async for _ in open_items:
            pass


async def compare_turns(label: str, provider: Any, rounds: int, batch: int, switch: Switch) -> None:
    """A turn and a streamed turn: the instance's ``complete``/``stream`` (the
    hook) against its class's (the same turn with no hook at all)."""
    own = type(provider)
    await compare(
        f"{label} (complete)",
        lambda: own.complete(provider, REQUEST),
        lambda: provider.complete(REQUEST),
        rounds,
        batch,
        switch,
    )
    await compare(
        f"{label} (stream)",
        lambda: drain(own.stream(provider, REQUEST)),
        lambda: drain(provider.stream(REQUEST)),
        rounds,
        batch,
        switch,
    )


async def main(rounds: int, batch: int) -> None:
    base_kb = kb.sample()
    assert not telemetry.enabled()
    turn = stub.provider(default=ANSWER)
    assert type(turn) is StubProvider  # no wrapper, on or off
    toolset = tools.Toolset(base_kb)
    call_plain: Callable[..., Awaitable[object]] = tools.Toolset._call.__wrapped__  # type: ignore[attr-defined]
    vote_plain: Callable[..., Awaitable[object]] = pool.vote.__wrapped__  # type: ignore[attr-defined]
    voters = pool.stub_pool(default="Yes.", size=3)

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])

    def switch(on: bool) -> None:
        if on:
            telemetry.enable(tracer_provider, meter_provider)
        else:
            telemetry.disable()

    print(f"medians over {rounds} rounds of {batch} calls; telemetry off unless 'on'")
    await compare_turns("stub turn", turn, rounds, batch, switch)
    await compare(
        "tool call (kb_query)",
        lambda: call_plain(toolset, base_kb, "kb_query", GOAL, 4000),
        lambda: toolset.call("kb_query", GOAL),
        rounds,
        max(1, batch // 10),
        switch,
    )
    await compare(
        "3-turn stub vote",
        lambda: vote_plain(voters, REQUEST),
        lambda: pool.vote(voters, REQUEST),
        rounds,
        max(1, batch // 4),
        switch,
    )
    fake = await FakeOllama(cache=True).start()
    try:
        async with ollama.provider(host=fake.url) as http:
            await compare_turns("loopback Ollama turn", http, rounds, max(1, batch // 20), switch)
    finally:
        await fake.stop()
    tracer_provider.shutdown()
    meter_provider.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.batch))
