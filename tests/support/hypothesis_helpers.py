"""Hypothesis helpers shared by the property tests."""

from __future__ import annotations

import dis
import functools
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st


def recursive(
    base: st.SearchStrategy[Any],
    extend: Callable[[st.SearchStrategy[Any]], st.SearchStrategy[Any]],
    *,
    max_leaves: int,
) -> st.SearchStrategy[Any]:
    """``st.recursive``, with its "extend uses its argument" check made here,
    once, from the function's code object instead of from its source file.

    Hypothesis makes that check when the strategy is first drawn from, by
    reading the function's source from disk. A test file edited, merged or
    checked out while the suite runs then yields other lines, and when those
    lack the argument's name Hypothesis emits a HypothesisDeprecationWarning:
    an error under ``filterwarnings = error``, in a test that did nothing
    wrong. The bytecode cannot drift from what runs, so the check is made on
    it, and Hypothesis gets a ``functools.partial`` (no source to re-read).
    """
    code = extend.__code__
    name = code.co_varnames[0]

    def loads(argval: object) -> bool:
        return argval == name or (isinstance(argval, tuple) and name in argval)

    if name not in code.co_cellvars and not any(
        ins.opname.startswith("LOAD_FAST") and loads(ins.argval)
        for ins in dis.get_instructions(code)
    ):
        raise ValueError(f"extend never uses its argument {name!r}, so it cannot recurse")
    return st.recursive(base, functools.partial(extend), max_leaves=max_leaves)
