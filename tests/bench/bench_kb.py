"""Benchmarks of the embedded KB engine. Run: ``.venv/bin/python tests/bench/bench_kb.py``.

Prints: EDN load rate, linear loading (10k/20k/40k-line files of ``genlCtx`` chains,
``arity`` declarations and same-head rules, and a 10^5-sentence file: seconds, µs per
line and the 40k/10k per-line ratio, about 1 when linear, 4 when quadratic; alone
with ``--linear``), the sample KB's load time (target < 100 ms), snapshot reopen
rate (sentexes/s), bytes per sentex
(tracemalloc, 10^6 three-term sentences; target < 500), find-sentexes with one bound
constant on 10^3 and 10^6 KBs and their ratio (target < 2), and query over a 5-rule
chain. ``--n`` changes the big KB's size.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import edn_format

from vaelii_llm import kb
from vaelii_llm.kb import _reads as reads


def best_of(fn: Callable[[], Any], repeat: int = 7, number: int = 200) -> float:
    """Median seconds per call over `repeat` runs of `number` calls."""
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - t) / number)
    return statistics.median(runs)


LINEAR_FILES: dict[str, Callable[[int], str]] = {
    "genlCtx chain": lambda n: "\n".join(f"(genlCtx C{i + 1} C{i})" for i in range(n)),
    "arity decls": lambda n: "\n".join(f"(arity p{i} 2)" for i in range(n)),
    "same-head rules": lambda n: "\n".join(f"(implies (q{i} ?x) (isa ?x T))" for i in range(n)),
}


def linear_loading() -> None:
    """KB loading is linear in the file: each derived table is updated per line, not
    rebuilt (a rebuilt genlCtx table made 20,000 chain lines take 347 s)."""
    for name, make in LINEAR_FILES.items():
        per_line = {}
        for n in (10_000, 20_000, 40_000):
            text = make(n)
            t = time.perf_counter()
            kb.load_edn(text)
            dt = time.perf_counter() - t
            per_line[n] = dt / n
            print(f"load {name:16} {n:>7,} lines: {dt:6.2f} s, {dt / n * 1e6:6.1f} us/line")
        ratio = per_line[40_000] / per_line[10_000]
        print(f"load {name:16} per-line 40k/10k ratio {ratio:.2f} (1 linear, 4 quadratic)")
    n = 10**5
    text = "(in-context CxBig)\n" + "\n".join(
        f"(genlCtx C{i + 1} C{i})"
        if i % 10 == 0
        else f"(arity r{i} 2)"
        if i % 10 == 1
        else f"(rel{i % 9} E{i % 5000} E{(i * 7919) % 5000})"
        for i in range(n)
    )
    t = time.perf_counter()
    big = kb.load_edn(text)
    dt = time.perf_counter() - t
    print(
        f"load a 10^5-sentence file ({len(text) / 1e6:.1f} MB): {dt:6.2f} s, "
        f"{dt / n * 1e6:6.1f} us/line, {reads.sentex_count(big):,} sentexes"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10**6)
    ap.add_argument("--edn-n", type=int, default=20_000)
    ap.add_argument("--linear", action="store_true", help="only the linear-loading figures")
    args = ap.parse_args()
    if args.linear:
        linear_loading()
        return

    # EDN load rate: one file, one edn_format.loads call
    text = "(in-context CxBench)\n" + "\n".join(
        f"(rel{i % 9} E{i % 5000} E{(i * 7919) % 5000})" for i in range(args.edn_n)
    )
    t = time.perf_counter()
    k_edn = kb.load_edn(text)
    dt = time.perf_counter() - t
    n_edn = reads.sentex_count(k_edn)
    print(f"EDN load:        {n_edn:>9,} sentexes in {dt:6.2f} s = {n_edn / dt:>10,.0f} /s")
    linear_loading()
    kb.sample()  # the first load imports edn_format
    sample_ms = best_of(kb.sample, repeat=5, number=5) * 1000
    from importlib import resources

    sample_text = resources.files("vaelii_llm.kb").joinpath("data/sample.edn").read_text("utf-8")
    parse_ms = best_of(lambda: kb.load_edn(sample_text), repeat=5, number=5) * 1000
    print(
        f"sample KB load:  {sample_ms:6.1f} ms median; fresh parse of its text {parse_ms:6.1f} ms"
        " (target < 100)"
    )

    # memory: tracemalloc around building n three-term sentences
    gc.collect()
    tracemalloc.start()
    t = time.perf_counter()
    big = kb.synthetic(args.n)
    build = time.perf_counter() - t
    gc.collect()
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"synthetic({args.n:,}): built in {build:.1f} s under tracemalloc")
    print(f"bytes/sentex:    {used / args.n:8.1f} (target < 500)")
    t = time.perf_counter()
    kb.synthetic(args.n)
    print(f"synthetic({args.n:,}): {time.perf_counter() - t:.1f} s without tracemalloc")

    # snapshot reopen rate
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "big.kb"
        t = time.perf_counter()
        kb.save(big, p)
        save_s = time.perf_counter() - t
        t = time.perf_counter()
        again = kb.open(p)
        open_s = time.perf_counter() - t
        size = p.stat().st_size
    n = reads.sentex_count(again)
    print(f"snapshot save:   {save_s:6.2f} s, {size / 2**20:.1f} MiB")
    print(f"snapshot reopen: {n:>9,} sentexes in {open_s:6.2f} s = {n / open_s:>10,.0f} /s")

    # find-sentexes with one bound constant: 10^3 vs 10^6
    small = kb.synthetic(1000)
    pat = edn_format.loads("(?p E7 ?x)")
    for k_ in (small, big):
        assert len(list(reads.find_sentexes(k_, pat))) == 10
    t_small = best_of(lambda: list(reads.find_sentexes(small, pat)))
    t_big = best_of(lambda: list(reads.find_sentexes(big, pat)))
    print(
        f"find-sentexes (?p E7 ?x): 10^3 {t_small * 1e6:7.1f} us, "
        f"{args.n:,} {t_big * 1e6:7.1f} us, ratio {t_big / t_small:.2f} (target < 2)"
    )

    # query over a 5-rule chain
    chain = ["(in-context CxChain)"]
    chain += [f"(p0 X{i})" for i in range(100)]
    chain += [f"(implies (p{i} ?x) (p{i + 1} ?x))" for i in range(5)]
    kc = kb.load_edn("\n".join(chain))
    goal1 = edn_format.loads("(p5 X42)")
    goal_all = edn_format.loads("(p5 ?x)")
    assert reads.query_p(kc, goal1, edn_format.Symbol("CxChain"))
    t1 = best_of(lambda: list(reads.query(kc, goal1, edn_format.Symbol("CxChain"))), number=50)
    tall = best_of(lambda: list(reads.query(kc, goal_all, edn_format.Symbol("CxChain"))), number=5)
    print(
        f"query 5-rule chain: one ground goal {t1 * 1e6:7.1f} us; "
        f"all 100 answers {tall * 1e3:6.2f} ms"
    )


if __name__ == "__main__":
    main()
