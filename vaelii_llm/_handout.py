"""The edge every provider the library hands a caller passes: selection
(:func:`vaelii_llm.providers.provider`) and the vote pools.

A backend is built bare and knows nothing of what wraps it on its way out:
telemetry's wrapper while it records (:func:`vaelii_llm.telemetry.handed_out`,
which hands a provider back bare while it is off and reads
``VAELII_LLM_OTEL``). This edge, not the backends, stands above telemetry.
"""

from __future__ import annotations

from typing import TypeVar
from typing import cast

from vaelii_llm._protocol import Provider

__all__ = ["handed_out"]

P = TypeVar("P", bound=Provider)


def handed_out(provider: P, kind: str) -> P:
    """``provider`` (of the backend ``kind``) as a caller gets it: itself, or
    wrapped while telemetry records. The wrapper passes for the provider
    (every other attribute forwarded, ``isinstance`` the same), so it is
    typed as the provider."""
    from vaelii_llm import telemetry  # loaded on the first hand-out

    return cast(P, telemetry.handed_out(provider, kind))
