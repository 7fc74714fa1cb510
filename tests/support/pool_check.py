"""What a test checks of a provider's pool once its turns are over."""

from __future__ import annotations

from typing import Any

__all__ = ["checked_in"]


def checked_in(provider: Any) -> None:
    """No connection checked out of the provider's pool: its gate whole, its
    connector holding none (idle ones kept for reuse are not checked out),
    no body being read."""
    gate = provider._sessions.gate()
    assert gate is not None
    assert gate.taken == 0
    session = provider._sessions.current()
    assert session is not None
    assert session.connector is not None
    assert not session.connector._acquired
    assert not provider._inflight
