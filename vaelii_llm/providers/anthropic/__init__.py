"""The Messages API backend.

``provider(credential=..., base_url=..., model=..., effort=..., headers=...)``
builds an :class:`AnthropicProvider` without I/O; it is an async context
manager owning one HTTP session (opened on the first turn, closed by
``aclose``, after which every turn raises :class:`~vaelii_llm.errors.LLMClosed`).

What goes out
    The request as the API takes it, with adaptive thinking, the request's
    ``effort`` (else the provider's, default :data:`DEFAULT_EFFORT`) and
    server-side fallbacks unless the request sets ``fallbacks=None``;
    ``temperature``, ``top_p``, ``top_k`` and ``tool_choice`` are never sent
    (this model family refuses them). A block carrying ``raw`` goes back
    exactly as received. Details: :mod:`._encode`.

What comes back
    Every block keeps its JSON in ``raw``; a type not modelled is an
    ``OpaqueBlock``; the API's stop reasons pass through (an unknown word
    becomes the nearest neutral one), the word as sent kept on
    ``Response.vendor_stop_reason``. ``stream`` yields each block whole as
    it closes, then the same Response ``complete`` returns. Details:
    :mod:`._decode`, :mod:`._stream`.

Credentials
    An explicit ``credential`` (a ``str`` is an API key; a :class:`Credential`
    says its kind), or one in the environment, is read and checked when the
    provider is built (no I/O). With neither, the first turn looks further
    (the environment again, then the ``ant`` CLI, killed after a few seconds,
    outside the turn's ``timeout_ms``) and the provider keeps what it found:
    the skeleton's credential step, so concurrent first turns share one
    lookup, a lookup that finds nothing fails the turns waiting on it (the
    next turn looks again), and cancelling the turn kills the CLI. The
    credential appears in no message, log line or repr. Details:
    :mod:`._credentials`.

Availability
    :func:`available`, what selection asks, is the credential alone, as
    specified: a host down for a moment when a provider is chosen must not
    leave a long-lived process on the stub, and a turn to an unreachable host
    fails with its own typed error. :func:`unavailable_reason`, what
    ``vaelii-llm status`` and ``ask`` ask before they start, also probes the
    base URL: a ``GET /v1/models`` under :data:`PROBE_TIMEOUT_MS` (any
    status, a 401 or 404 included, is an answer; no credential is sent with
    it), so a dead local server is named with its fix there, as on the other
    HTTP backends.

There is no retry: a 429 or 529 is an ``LLMApiError`` carrying its status.
The session, the closed state, the credential step, the turn and the stream
pump are the shared skeleton's (:mod:`vaelii_llm.providers._http`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any
from typing import Final

import msgspec

from vaelii_llm import _backends
from vaelii_llm import errors
from vaelii_llm._base_url import api_base
from vaelii_llm._transport.send import request_json
from vaelii_llm._transport.sessions import probe_session
from vaelii_llm._transport.settings import DEFAULT_NETWORK
from vaelii_llm._transport.settings import Deadline
from vaelii_llm._transport.settings import Network
from vaelii_llm._wire.sse import Frame
from vaelii_llm.errors import LLMBadCredential
from vaelii_llm.errors import LLMNoCredential
from vaelii_llm.providers._http import ClientSession
from vaelii_llm.providers._http import Credentials
from vaelii_llm.providers._http import HTTPProvider
from vaelii_llm.providers._http import SSLOption
from vaelii_llm.providers._http import network
from vaelii_llm.providers.anthropic import _credentials as credentials
from vaelii_llm.providers.anthropic._codec import MessagesCodec
from vaelii_llm.providers.anthropic._codec import endpoint
from vaelii_llm.providers.anthropic._credentials import Credential
from vaelii_llm.providers.anthropic._encode import DEFAULT_EFFORT
from vaelii_llm.providers.anthropic._encode import DEFAULT_MODEL
from vaelii_llm.providers.anthropic._status import drops_tools
from vaelii_llm.providers.anthropic._status import status_lines

__all__ = [
    "DEFAULT_EFFORT",
    "DEFAULT_MODEL",
    "AnthropicProvider",
    "Credential",
    "available",
    "provider",
    "unavailable_reason",
]

log = logging.getLogger("vaelii_llm.providers.anthropic")

PROBE_PATH: Final = "/v1/models"
PROBE_TIMEOUT_MS: Final = 2_000
"""The reachability probe's whole-request deadline, connection included: a
server that is up answers an HTTP request in milliseconds, whatever it says."""

_ANY_JSON: Final = msgspec.json.Decoder()

_ANT_TOKENS: Final = credentials.AntTokens()
"""The ``ant`` CLI's token as this backend last found it, shared by its probe
and every provider it builds: choosing the backend and its first turn run the
CLI once.

One per process, not one per provider, on purpose (#60 asked): the token is
the process's, not a provider's. The CLI answers every provider of the
process the same (it reads the user's login under the process's ``PATH``,
the cache's key), so a cache per provider would only run it again, up to
:data:`~vaelii_llm.providers.anthropic._credentials.ANT_TIMEOUT_S` each time:
once for the probe that chose the backend and again for the provider built
next, and once more for each provider a web backend or a vote builds. What
it shares is bounded instead: at most one token, for
:data:`~vaelii_llm.providers.anthropic._credentials.ANT_REUSE_S` seconds,
forgotten on a failure or another ``PATH``, never shown; an explicit
credential or one from the environment never enters it; and a provider keeps
what it found on its own (its credential step), so closing or replacing the
cache's token changes no provider already answering."""


class AnthropicProvider(HTTPProvider[dict[str, Any], list[Frame]]):
    """A Messages API provider; build it with :func:`provider`. Usable from any event loop."""

    def __init__(
        self,
        codec: MessagesCodec,
        credential: Credentials[Credential],
        network: Network = DEFAULT_NETWORK,
    ) -> None:
        super().__init__(codec, credential, network)
        self._messages = codec
        self._credential_step = credential
        self.endpoint = codec.endpoint
        self.base_url = codec.shown_url  # the far end, as messages and spans name it

    def __repr__(self) -> str:
        codec = self._messages
        return (
            f"AnthropicProvider(base_url={codec.shown_url!r}, model={codec.model!r}, "
            f"effort={codec.effort!r})"
        )

    @property
    def model(self) -> str:
        return self._messages.model

    async def credential(self) -> Credential:
        """The credential turns send, looking it up (once) when the provider
        was built without one. Raises ``LLMNoCredential`` when there is none."""
        return await self._credential_step.get()


_HOOKS = (drops_tools, status_lines)
"""What the command finds here by name (:data:`vaelii_llm._backends.Hook`)."""


def provider(
    *,
    credential: str | Credential | None = None,
    base_url: str | None = None,
    model: str | None = None,
    effort: str | None = None,
    headers: Mapping[str, str] | None = None,
    proxy: str | None = None,
    ssl: SSLOption = None,
    max_connections: int | None = None,
    session: ClientSession | None = None,
) -> AnthropicProvider:
    """A Messages API provider, built without I/O (see the module docstring).

    ``headers`` are sent on every request (a gateway's or proxy's own); they
    are never logged or shown. A ``user:password@`` in ``base_url`` is sent as
    the URL says and cut from every message and the repr. ``proxy``, ``ssl``,
    ``max_connections``, ``session``: how it reaches the API, as on every HTTP
    backend (:class:`~vaelii_llm.providers._http.NetworkOptions`)."""
    reach = network(
        {"proxy": proxy, "ssl": ssl, "max_connections": max_connections, "session": session}
    )
    where = api_base(_backends.anthropic_base_url(base_url))
    chosen = _backends.anthropic_model(model) or DEFAULT_MODEL
    codec = MessagesCodec(where, chosen, effort or DEFAULT_EFFORT, headers or {})
    step = Credentials(
        functools.partial(credentials.resolve, tokens=_ANT_TOKENS),
        credentials.resolve_now(credential),
    )
    return AnthropicProvider(codec, step, reach)


async def _missing(
    credential: str | Credential | None,
) -> LLMNoCredential | LLMBadCredential | None:
    """Why no usable credential can be found, or None when one can."""
    try:
        await credentials.resolve(credential, tokens=_ANT_TOKENS)
    except (LLMNoCredential, LLMBadCredential) as exc:
        return exc
    return None


async def _silent(
    base_url: str | None, proxy: str | None, ssl: SSLOption, session: ClientSession | None
) -> errors.LLMUnreachable | errors.LLMTimeout | errors.LLMApiError | None:
    """Why the host at ``base_url`` gave no HTTP answer (unreachable, or
    silent past :data:`PROBE_TIMEOUT_MS`), or a 404 whose cause is known (a
    base URL ending in ``/v1``: its error names the fix), or None when it
    answered anything else."""
    where = api_base(_backends.anthropic_base_url(base_url))
    try:
        await request_json(
            probe_session(network({"proxy": proxy, "ssl": ssl, "session": session}), where.url),
            endpoint(where),
            "GET",
            where.at(PROBE_PATH),
            deadline=Deadline.after_ms(PROBE_TIMEOUT_MS),
            decoder=_ANY_JSON,
        )
    except (errors.LLMUnreachable, errors.LLMTimeout) as exc:
        return exc
    except errors.LLMApiError as exc:  # a status answers, unless it names its own fix
        return exc if exc.next_step is not None else None
    except errors.LLMError:  # a body that is not JSON: it answers
        return None
    return None


async def unavailable_reason(
    credential: str | Credential | None = None,
    base_url: str | None = None,
    *,
    proxy: str | None = None,
    ssl: SSLOption = None,
    session: ClientSession | None = None,
) -> str | None:
    """None when a credential can be found (see :func:`available`) and the
    host at ``base_url`` (default ``ANTHROPIC_BASE_URL``) answers HTTP within
    :data:`PROBE_TIMEOUT_MS`, else one line saying what is missing, unusable
    or silent and what to do; never a credential's value."""
    missing = await _missing(credential)
    if isinstance(missing, LLMBadCredential):
        return f"{missing.type}: {missing}; set it again without that character (a pasted newline?)"
    if missing is not None:
        return f"{missing.type}: {missing}; set ANTHROPIC_API_KEY or run `ant auth login`"
    silent = await _silent(base_url, proxy, ssl, session)
    if silent is None:
        return None
    if isinstance(silent, errors.LLMApiError):  # its message ends in the fix
        return f"{silent.type}: {silent}"
    return (
        f"{silent.type}: {silent}; start the server there or point ANTHROPIC_BASE_URL at one "
        "that serves /v1/messages"
    )


async def available(
    credential: str | Credential | None = None,
    base_url: str | None = None,
    *,
    proxy: str | None = None,
    ssl: SSLOption = None,
    session: ClientSession | None = None,
) -> bool:
    """Whether a credential can be found (the explicit one, the environment's,
    or the ``ant`` CLI's): the check the specification hands only the
    credential, so the host is not asked (see the module docstring). It takes
    ``base_url``, ``proxy``, ``ssl`` and ``session`` as
    :func:`unavailable_reason` does, which is given what this takes and
    probes the host with them. An unusable credential (a control character)
    answers False and is logged at WARNING naming its header, never its value."""
    missing = await _missing(credential)
    if isinstance(missing, LLMBadCredential):
        log.warning("the Messages API credential is unusable: %s", missing)
    return missing is None
