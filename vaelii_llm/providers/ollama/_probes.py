"""What a host can do, asked before a turn: its version, a model's
capabilities and context length, and a warm-up that loads a model.

Each probe sends on the one shared probe session of the running loop
(:func:`vaelii_llm._transport.sessions.probe_session`), under its own whole-request
deadline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from typing import Final
from typing import TypeVar

import msgspec

from vaelii_llm import _backends
from vaelii_llm import errors
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._transport.send import request_json
from vaelii_llm._transport.sessions import probe_session
from vaelii_llm._transport.settings import DEFAULT_NETWORK
from vaelii_llm._transport.settings import Deadline
from vaelii_llm._transport.settings import Network
from vaelii_llm.providers._http import ClientSession
from vaelii_llm.providers._http import SSLOption
from vaelii_llm.providers._http import network
from vaelii_llm.providers.ollama._chat import _ENCODER
from vaelii_llm.providers.ollama._chat import ChatCodec
from vaelii_llm.providers.ollama._chat import api_key
from vaelii_llm.providers.ollama._chat import base
from vaelii_llm.providers.ollama._chat import endpoint

__all__ = [
    "ShowResponse",
    "available",
    "capabilities",
    "context_length",
    "show",
    "supports_tools",
    "unavailable_reason",
    "version",
    "warm",
]

T = TypeVar("T")

VERSION_TIMEOUT_MS: Final = 2_000
"""The version probe's whole-request deadline, connection included."""

SHOW_TIMEOUT_MS: Final = 10_000
"""``/api/show`` reads a model's metadata from disk; a loaded host answers in
milliseconds, a busy one in a few seconds."""

WARM_TIMEOUT_MS: Final = 300_000
"""The warm-up's deadline (:func:`warm`'s ``timeout_ms``): a cold load of a
30B model from disk can take minutes."""


class _Version(msgspec.Struct, frozen=True):
    version: str


class ShowResponse(msgspec.Struct, frozen=True):
    """What ``/api/show`` answers that the probes read."""

    capabilities: list[str] = []
    model_info: dict[str, Any] = {}
    parameters: str | None = None


class _ShowRequest(msgspec.Struct, frozen=True):
    model: str


_VERSION_DECODER: Final = msgspec.json.Decoder(_Version)
_SHOW_DECODER: Final = msgspec.json.Decoder(ShowResponse)


async def _ask(
    host: str | None,
    method: str,
    path: str,
    decoder: msgspec.json.Decoder[T],
    timeout_ms: int,
    body: bytes | None = None,
    reach: Network = DEFAULT_NETWORK,
) -> T:
    """One probe of the host at ``host``: ``path`` under a whole-request deadline."""
    where = base(host)
    key = api_key()
    return await request_json(
        probe_session(reach, where.url),
        endpoint(where),
        method,
        where.at(path),
        deadline=Deadline.after_ms(timeout_ms),
        decoder=decoder,
        body=body,
        headers=None if key is None else key.headers(),
    )


async def version(
    host: str | None = None,
    *,
    timeout_ms: int = VERSION_TIMEOUT_MS,
    proxy: str | None = None,
    ssl: SSLOption = None,
    session: ClientSession | None = None,
) -> str:
    """The host's Ollama version (``/api/version``), under a whole-request
    deadline of ``timeout_ms``. Raises the typed error when it cannot answer.
    ``proxy``, ``ssl``, ``session``: as a provider's (NetworkOptions)."""
    reach = network({"proxy": proxy, "ssl": ssl, "session": session})
    return (
        await _ask(host, "GET", "/api/version", _VERSION_DECODER, timeout_ms, None, reach)
    ).version


async def unavailable_reason(
    host: str | None = None,
    *,
    proxy: str | None = None,
    ssl: SSLOption = None,
    session: ClientSession | None = None,
) -> str | None:
    """None when an Ollama answers ``/api/version`` at ``host`` within
    :data:`VERSION_TIMEOUT_MS`, else one line naming the host, the cause and
    the next step. Never raises."""
    try:
        await version(host, proxy=proxy, ssl=ssl, session=session)
    except errors.LLMError as exc:
        return (
            f"{exc.type}: {exc}; start Ollama there (`ollama serve`) "
            "or point VAELII_OLLAMA_HOST at one"
        )
    except ValueError as exc:  # a host no URL can be made of
        return f"error: {exc}; fix VAELII_OLLAMA_HOST"
    return None


async def available(
    host: str | None = None,
    *,
    proxy: str | None = None,
    ssl: SSLOption = None,
    session: ClientSession | None = None,
) -> bool:
    """Whether an Ollama answers at ``host`` within :data:`VERSION_TIMEOUT_MS`. Never raises
    for an unreachable, slow, wrong or malformed host: it answers False."""
    return await unavailable_reason(host, proxy=proxy, ssl=ssl, session=session) is None


async def show(
    model: str | None = None, host: str | None = None, *, timeout_ms: int = SHOW_TIMEOUT_MS
) -> ShowResponse:
    """``/api/show`` for ``model`` (default ``VAELII_OLLAMA_MODEL``). An unknown
    model is the host's 404, :class:`~vaelii_llm.errors.LLMApiError`."""
    body = _ENCODER.encode(_ShowRequest(model=_backends.ollama_model(model)))
    return await _ask(host, "POST", "/api/show", _SHOW_DECODER, timeout_ms, body)


async def capabilities(model: str | None = None, host: str | None = None) -> frozenset[str]:
    """What ``model`` can do, as the host reports it (``{"completion", "tools"}``).
    Raises the typed error when the host cannot answer."""
    return frozenset((await show(model, host)).capabilities)


async def supports_tools(model: str | None = None, host: str | None = None) -> bool:
    """Whether ``model`` has the ``tools`` capability. Ask before sending tools:
    a model without it has no tools section in its chat template, and the
    schemas only spend its context length. False for an unreachable host too,
    since a wrong yes spends that context length."""
    try:
        return "tools" in await capabilities(model, host)
    except (errors.LLMError, ValueError):
        return False


async def context_length(model: str | None = None, host: str | None = None) -> int | None:
    """The context length ``model`` was trained for (``<arch>.context_length``
    in ``model_info``), or None when the host does not say. This is the
    ceiling, not what a request asks for: that is ``num_ctx``."""
    info = (await show(model, host)).model_info
    arch = info.get("general.architecture")
    keys = [f"{arch}.context_length"] if isinstance(arch, str) else []
    keys += sorted(k for k in info if k.endswith(".context_length"))
    for key in keys:
        value = info.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


_PREFILL_SENTENCE: Final = (
    "The quick brown fox jumps over the lazy dog while the knowledge base "
    "records that every spider is an arachnid and no arachnid is an insect. "
)


def _prefill(num_ctx: int) -> str:
    """Roughly a quarter of ``num_ctx`` tokens of ordinary prose (about 30
    tokens per sentence): the size of a real turn's prompt, so the first real
    turn finds its buffers allocated."""
    sentences = max(1, num_ctx // 4 // 30)
    return _PREFILL_SENTENCE * sentences


async def warm(
    host: str | None = None,
    model: str | None = None,
    num_ctx: int | None = None,
    keep_alive: str | None = None,
    *,
    timeout_ms: int = WARM_TIMEOUT_MS,
    headers: Mapping[str, str] | None = None,
    proxy: str | None = None,
    ssl: SSLOption = None,
    session: ClientSession | None = None,
) -> Response:
    """Load ``model`` (default: the generation model) and hold it resident.

    Sends a prefill of realistic size at the configured context length and
    generates one token, as a provider's turn with these options would;
    Ollama keys a loaded model by its ``num_ctx``, so a warm-up at any other
    length would be evicted by the first real turn. Returns that turn (its
    ``usage.load_duration`` tells a cold load from a warm one). Raises the
    typed error when the host cannot do it: a caller asking for a resident
    model wants to know it is not there. ``headers`` are sent with it, as a
    provider sends its own.
    """
    ctx = _backends.ollama_num_ctx(num_ctx)
    codec = ChatCodec(
        {
            "host": host,
            "model": _backends.ollama_generation_model(model),
            "keep_alive": keep_alive,
            "headers": headers,
        }
    )
    request = Request(
        messages=[Message(role="user", content=_prefill(ctx) + "\nAnswer with one word: ready.")],
        max_tokens=1,
        num_ctx=ctx,
        timeout_ms=timeout_ms,
    )
    chunk = await request_json(
        probe_session(network({"proxy": proxy, "ssl": ssl, "session": session}), codec.url),
        codec.endpoint,
        "POST",
        codec.url,
        deadline=Deadline.after_ms(timeout_ms),
        decoder=codec.whole_decoder,
        body=codec.body(request, stream=False),
        headers=codec.session_headers(),
    )
    return codec.whole(chunk)
