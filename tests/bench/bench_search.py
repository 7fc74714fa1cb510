"""Benchmark: the proof-search reads (`vaelii_llm.kb._verdicts`, `_search_tree`,
`_tacticians`, `_within`, `_scenarios`, all on `_prover`) through the tools.

Two measurements:

* each read through :func:`vaelii_llm.tools.call` on a 10^3-sentex and a 10^6-sentex
  KB built by :func:`vaelii_llm.kb.synthetic`, with one bound constant (the index
  answers, so the size should not matter: a ratio about 1);
* the three strategies of ``compare-tacticians`` on sample-KB goals: the steps each
  took to its first answer and its median time.

Run: ``.venv/bin/python tests/bench/bench_search.py`` (about 20 s, most of it building
the 10^6 KB). Prints median milliseconds per call.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm.kb import _tacticians as tacticians

CALLS = 100
WARMUP = 30
CASES: list[tuple[str, dict[str, Any]]] = [
    ("kb_query_status", {"goal": "(isa E77 ?t)", "context": "CxSynthetic"}),
    ("kb_argue", {"sentence": "(rel3 E77 ?y)", "context": "CxSynthetic"}),
    ("kb_search_tree", {"goal": "(rel3 E77 ?y)", "context": "CxSynthetic"}),
    ("kb_compare_tacticians", {"goal": "(isa E77 ?t)", "context": "CxSynthetic"}),
    ("kb_ask_within", {"sentence": "(rel3 E77 ?y)", "context": "CxSynthetic"}),
    ("kb_prove_within", {"goal": "(isa E77 ?t)", "context": "CxSynthetic"}),
    (
        "kb_qualitative_scenarios",
        {"sentences": ["(rel3 E77 E1)", "(isa E77 T1)"], "context": "CxSynthetic"},
    ),
]
GOALS: list[tuple[str, str]] = [
    ("(afraidOf MissMuffet Muffet)", "CxNursery"),
    ("(avoids ?x ?y)", "CxPets"),
    ("(breathes ?x Air)", "CxNursery"),
    ("(safeFrom ?p BigBadWolf)", "CxFables"),
]


async def _timed(base: kb.KB, name: str, given: dict[str, Any]) -> float:
    start = time.perf_counter()
    result = await tools.call(base, name, given)
    elapsed = time.perf_counter() - start
    assert result.ok, result.error
    return elapsed


async def _sizes(small: kb.KB, large: kb.KB) -> None:
    print(f"{'tool':28} {'10^3 ms':>9} {'10^6 ms':>9} {'ratio':>7}")
    for name, given in CASES:
        for _ in range(WARMUP):
            await _timed(small, name, given)
            await _timed(large, name, given)
        small_t: list[float] = []
        large_t: list[float] = []
        for _ in range(CALLS):  # interleaved, so drift in the machine hits both alike
            small_t.append(await _timed(small, name, given))
            large_t.append(await _timed(large, name, given))
        small_ms = statistics.median(small_t) * 1000
        large_ms = statistics.median(large_t) * 1000
        print(f"{name:28} {small_ms:9.3f} {large_ms:9.3f} {large_ms / small_ms:7.2f}")


def _strategies() -> None:
    sample = kb.sample()
    print(f"\n{'goal (sample KB)':34} {'strategy':20} {'steps':>6} {'median ms':>10}")
    for goal, context in GOALS:
        runs: dict[str, list[tacticians.TacticianRun]] = {}
        for _ in range(30):
            for run in tacticians.compare_tacticians(sample, goal, context):
                runs.setdefault(run.strategy, []).append(run)
        for strategy, done in runs.items():
            ms = statistics.median(r.ms for r in done)
            print(
                f"{goal + ' ' + context:34} {strategy:20} {done[0].steps:6} {ms:10.3f}"
                f"  {done[0].status}"
            )


def main() -> None:
    start = time.perf_counter()
    small = kb.synthetic(10**3)
    large = kb.synthetic(10**6)
    print(f"built the KBs in {time.perf_counter() - start:.1f} s")
    asyncio.run(_sizes(small, large))
    _strategies()


if __name__ == "__main__":
    main()
