"""Importing a backend against importing what it stands on (aiohttp and msgspec).

What a program pays before its first turn is the import of the backend it
uses: ``import vaelii_llm`` alone loads no HTTP library, so the row that
matters is a backend's module (its first turn imports nothing more; see
``tests/house/test_imports.py``). Each row runs ``python -c "import X"`` in a
fresh interpreter, :data:`RUNS` times, order alternating with the floor
(``import aiohttp, msgspec``) and a bare interpreter (``pass``); the table
prints the medians, ``wall`` (ours over the floor, interpreter start-up
included) and ``net`` (both less the bare interpreter's start-up: the
imports alone).

Bytecode is written and read (a first, unmeasured run of each compiles it),
as in an installed package; this environment's ``PYTHONDONTWRITEBYTECODE``
is dropped for the runs.

Run: ``.venv/bin/python tests/bench/bench_import.py`` (about a minute). Quote
it on a quiet machine, with the load it prints.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

RUNS = 21

FLOOR = "import aiohttp, msgspec"
BARE = "pass"
BACKENDS = {
    "vaelii_llm (no backend)": "import vaelii_llm",
    "Messages API": "import vaelii_llm.providers.anthropic",
    "Ollama": "import vaelii_llm.providers.ollama",
    "Chat Completions": "import vaelii_llm.providers.openai",
    "Responses API": "import vaelii_llm.providers.openai_responses",
}

_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def seconds(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=_ENV)
    return time.perf_counter() - started


def main() -> None:
    cases = {"floor": FLOOR, "bare": BARE, **BACKENDS}
    for code in cases.values():
        seconds(code)  # compiles and caches the bytecode, fills the page cache
    runs: dict[str, list[float]] = {name: [] for name in cases}
    for n in range(RUNS):
        order = list(cases) if n % 2 else list(reversed(cases))
        for name in order:
            runs[name].append(seconds(cases[name]))
    median = {name: statistics.median(times) for name, times in runs.items()}
    floor, bare = median["floor"], median["bare"]
    print(
        f"load average {os.getloadavg()[0]:.2f}; medians of {RUNS} fresh interpreters each, "
        f"order alternating; floor: {FLOOR!r} {floor * 1000:.1f} ms, "
        f"bare interpreter {bare * 1000:.1f} ms"
    )
    print(f"{'import':26} {'ms':>7} {'wall':>6} {'net':>6}")
    for name in BACKENDS:
        mine = median[name]
        print(
            f"{name:26} {mine * 1000:7.1f} {mine / floor:6.3f} "
            f"{(mine - bare) / (floor - bare):6.3f}"
        )


if __name__ == "__main__":
    main()
