"""Asking a server what it serves: ``GET {base}/models``, on the probe session.

Each probe sends on the one shared probe session of the running loop
(:func:`vaelii_llm._transport.sessions.probe_session`), with the key and the caller's
headers a provider would send, under its own whole-request deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

import msgspec

from vaelii_llm import _backends
from vaelii_llm import errors
from vaelii_llm._base_url import api_base
from vaelii_llm._transport.send import request_json
from vaelii_llm._transport.sessions import probe_session
from vaelii_llm._transport.settings import Deadline
from vaelii_llm.providers._bearer import session_headers
from vaelii_llm.providers._http import ClientSession
from vaelii_llm.providers._http import SSLOption
from vaelii_llm.providers._http import network
from vaelii_llm.providers.openai._chat import endpoint
from vaelii_llm.providers.openai._key import APIKey
from vaelii_llm.providers.openai._server import refuse_two_authorizations

__all__ = ["MODELS_PATH", "MODELS_TIMEOUT_MS", "available", "models", "unavailable_reason"]

log = logging.getLogger("vaelii_llm.providers.openai")

MODELS_PATH: Final = "/models"
MODELS_TIMEOUT_MS: Final = 2_000
"""The probe's whole-request deadline, connection included: a server that is
up lists its models in milliseconds."""


class _Model(msgspec.Struct, frozen=True):
    id: str


class _ModelList(msgspec.Struct, frozen=True):
    data: list[_Model]


_MODELS_DECODER: Final = msgspec.json.Decoder(_ModelList)


async def models(
    base_url: str | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    *,
    timeout_ms: int = MODELS_TIMEOUT_MS,
    proxy: str | None = None,
    ssl: SSLOption = None,
    session: ClientSession | None = None,
) -> list[str]:
    """The ids of the models the server at ``base_url`` (default
    ``OPENAI_BASE_URL``) serves, in its order, under a whole-request deadline
    of ``timeout_ms``. Raises the typed error when it cannot answer (a 401 for
    a missing or wrong key is :class:`~vaelii_llm.errors.LLMApiError`)."""
    where = api_base(_backends.openai_base_url(base_url))
    key = APIKey.of(api_key)
    named_by = "base_url" if base_url else "OPENAI_BASE_URL"
    refuse_two_authorizations(where.url, named_by, key, headers)
    listed = await request_json(
        probe_session(network({"proxy": proxy, "ssl": ssl, "session": session}), where.url),
        endpoint(where),
        "GET",
        where.at(MODELS_PATH),
        deadline=Deadline.after_ms(timeout_ms),
        decoder=_MODELS_DECODER,
        headers=session_headers(key, headers),
    )
    return [model.id for model in listed.data]


async def _failure(
    base_url: str | None,
    api_key: str | None,
    headers: Mapping[str, str] | None,
    proxy: str | None,
    ssl: SSLOption,
    session: ClientSession | None,
) -> errors.LLMError | ValueError | None:
    """Why the server at ``base_url`` did not list its models, or None."""
    try:
        await models(base_url, api_key, headers, proxy=proxy, ssl=ssl, session=session)
    except (errors.LLMError, ValueError) as exc:
        return exc
    return None


async def unavailable_reason(
    base_url: str | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    *,
    proxy: str | None = None,
    ssl: SSLOption = None,
    session: ClientSession | None = None,
) -> str | None:
    """None when the server at ``base_url`` lists its models within
    :data:`MODELS_TIMEOUT_MS` (see :func:`available`), else one line naming the server, the
    cause and the next step; never the key. Never raises."""
    failed = await _failure(base_url, api_key, headers, proxy, ssl, session)
    if failed is None:
        return None
    if isinstance(failed, ValueError):
        return f"error: {failed}; fix OPENAI_BASE_URL"
    if isinstance(failed, errors.LLMBadCredential):
        return f"{failed.type}: {failed}; set OPENAI_API_KEY again without that character"
    if isinstance(failed, errors.LLMApiError) and failed.status in (401, 403):
        return f"{failed.type}: {failed}; set OPENAI_API_KEY to a key this server accepts"
    if isinstance(failed, errors.LLMApiError) and failed.status >= 500:
        return f"{failed.type}: {failed}; the server there failed listing its models (see its log)"
    if isinstance(failed, errors.LLMApiError):
        return f"{failed.type}: {failed}; point OPENAI_BASE_URL at the server's /v1"
    return f"{failed.type}: {failed}; start the server there or point OPENAI_BASE_URL at one"


async def available(
    base_url: str | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    *,
    proxy: str | None = None,
    ssl: SSLOption = None,
    session: ClientSession | None = None,
) -> bool:
    """Whether the server at ``base_url`` lists its models within :data:`MODELS_TIMEOUT_MS`.
    Never raises for an unreachable, slow, wrong or refusing server (a 401
    too): it answers False. An unusable key (a control character) answers
    False and is logged at WARNING naming its header, never its value."""
    failed = await _failure(base_url, api_key, headers, proxy, ssl, session)
    if isinstance(failed, errors.LLMBadCredential):
        log.warning("the OpenAI-compatible API key is unusable: %s", failed)
    return failed is None
