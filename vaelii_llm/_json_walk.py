"""A JSON value's atoms in order, walked without recursion.

A model's tool input is whatever it wrote, nested past any recursion limit or
of any length. Whoever measures or prints one walks it here, iteratively, and
stops as soon as it has what it needs, so the walk costs no more than that.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from typing import Any
from typing import Final

__all__ = ["atoms"]

_END: Final = object()


def atoms(value: Any, members: Callable[[Any], Iterator[Any] | None]) -> Iterator[Any]:
    """Every atom of ``value``, depth first: ``members(item)`` gives a compound
    item's members (``None`` for an atom, which is yielded). Lazy: a caller that
    stops early has walked only as far as it read."""
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        inner = members(item)
        if inner is None:
            yield item
        else:
            stack.append(inner)
