"""Benchmark: a tool call over a 10^6-sentex context against one over a 10^3-sentex one.

The tools print a lazy answer only as far as ``max_result_chars`` reaches, so a
read over a context a thousand times larger should cost about the same. Measured,
through :func:`vaelii_llm.tools.call` (argument reading, worker thread, engine
read, bounded printing), on KBs built by :func:`vaelii_llm.kb.synthetic`:

* ``kb_sentexes_in_context`` over the main context (the answer is cut at 4,000 chars);
* ``kb_find_sentexes`` with one bound constant (about ten matches);
* ``kb_query`` with one bound constant, through the rules (none in a synthetic KB:
  facts only, under the clock ceiling).

Then the event loop's lag while 8 CPU-bound reads (~0.2 s each, holding the GIL
as a pure-Python engine read does) run through one :class:`vaelii_llm.tools.Toolset`
with 2 and with 4 workers (the suite only checks it stays far below the ~1.6 s the
reads would stall a loop they ran on).

Run: ``.venv/bin/python tests/bench/bench_tools.py`` (about 20 s, most of it
building the 10^6 KB). Prints the median milliseconds per call for each size and
the ratio, 10^6 over 10^3 (about 1 means the size does not matter), and the lag.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator
from typing import Any

from vaelii_llm import engine
from vaelii_llm import kb
from vaelii_llm import tools

CALLS = 200
WARMUP = 30
CASES: list[tuple[str, dict[str, Any]]] = [
    ("kb_sentexes_in_context", {"context": "CxSynthetic"}),
    ("kb_find_sentexes", {"pattern": "(rel3 E77 ?y)"}),
    ("kb_query", {"goal": "(isa E77 ?t)", "context": "CxSynthetic"}),
]


async def _timed(base: kb.KB, name: str, given: dict[str, Any]) -> float:
    start = time.perf_counter()
    result = await tools.call(base, name, given)
    elapsed = time.perf_counter() - start
    assert result.ok, result.error
    return elapsed


async def _run(small: kb.KB, large: kb.KB) -> None:
    print(f"{'tool':28} {'10^3 ms':>9} {'10^6 ms':>9} {'ratio':>7} {'chars':>6}")
    for name, given in CASES:
        for _ in range(WARMUP):  # threads, caches and the EDN reader warm on both
            await _timed(small, name, given)
            await _timed(large, name, given)
        small_t: list[float] = []
        large_t: list[float] = []
        for _ in range(CALLS):  # interleaved, so drift in the machine hits both alike
            small_t.append(await _timed(small, name, given))
            large_t.append(await _timed(large, name, given))
        small_ms = statistics.median(small_t) * 1000
        large_ms = statistics.median(large_t) * 1000
        chars = len((await tools.call(large, name, given)).text)
        print(f"{name:28} {small_ms:9.3f} {large_ms:9.3f} {large_ms / small_ms:7.2f} {chars:6}")
    before = large.stats["realized"]
    await tools.call(large, "kb_sentexes_in_context", {"context": "CxSynthetic"})
    realized = large.stats["realized"] - before
    print(f"records realized for one 4,000-char answer over 10^6: {realized}")


@engine.op("slow")
def _slow(base: kb.KB, n: int) -> Iterator[int]:
    """CPU-bound: n steps of about 2 ms each, answered lazily as the engine's reads are."""
    for i in range(n):
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass
        yield i


async def _lag(workers: int) -> tuple[float, float]:
    """The loop's largest and median lag (ms) while 8 slow reads run."""
    eng = engine.embedded().with_ops({"slow": _slow})
    toolset = tools.Toolset(None, engine=eng, workers=workers)
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    done = asyncio.Event()

    async def monitor() -> None:
        while not done.is_set():
            start = loop.time()
            await asyncio.sleep(0.005)
            lags.append(loop.time() - start - 0.005)

    watcher = asyncio.create_task(monitor())
    await asyncio.gather(*(toolset.call("kb_slow", {"n": 100}) for _ in range(8)))
    done.set()
    await watcher
    return max(lags) * 1000, statistics.median(lags) * 1000


async def _lags() -> None:
    for workers in (2, 4):
        worst, median = await _lag(workers)
        print(
            f"loop lag, 8 slow reads, {workers} workers: "
            f"max {worst:5.1f} ms, median {median:4.1f} ms"
        )


def main() -> None:
    start = time.perf_counter()
    small = kb.synthetic(10**3)
    large = kb.synthetic(10**6)
    print(f"built KBs of 10^3 and 10^6 sentexes in {time.perf_counter() - start:.1f} s")
    asyncio.run(_run(small, large))
    asyncio.run(_lags())


if __name__ == "__main__":
    main()
