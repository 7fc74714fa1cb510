"""Closing on leaving ``async with``, written once for what the package lets a
caller hold open (a provider, a pool, an MCP toolset)."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["ClosesOnExit"]


class ClosesOnExit:
    """An async context manager whose exit is :meth:`aclose`, whether the block
    ended or raised; entering gives the object itself unless a subclass opens
    something there. A subclass says what :meth:`aclose` releases."""

    async def aclose(self) -> None:
        """Release what the object holds. Closing twice is harmless."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
