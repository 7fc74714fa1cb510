"""What a local server says of itself without a credential: whether its chat
template renders tools (llama.cpp's ``/props``), and the models it serves.

llama.cpp's ``llama-server`` drops the tools of a request, without a word, when
the chat template it runs renders none (a small model's own template often
does not); the model then answers without them. Its ``GET /props`` says so
beforehand: ``chat_template_caps.supports_tools`` is false. Both HTTP wires it
serves (the Messages API and Chat Completions) read it here, before ``vaelii-llm
ask`` sends the tools. A server that has no ``/props``, or will not answer it,
is trusted: nothing is known.
"""

from __future__ import annotations

from typing import Final
from typing import TypeVar

import msgspec

from vaelii_llm import errors
from vaelii_llm._transport.send import request_json
from vaelii_llm._transport.sessions import probe_session
from vaelii_llm._transport.settings import Deadline
from vaelii_llm._transport.settings import Endpoint
from vaelii_llm._transport.urls import hide_userinfo

__all__ = ["PROPS_TIMEOUT_MS", "no_tools_reason", "served_models"]

PROPS_TIMEOUT_MS: Final = 2_000
"""The probe's whole-request deadline: a server answers ``/props`` at once."""

NO_TOOLS_FIX: Final = (
    "start llama-server with --jinja and a tool-capable chat template "
    "(--chat-template-file), or serve a model whose own template renders tools"
)


class _Caps(msgspec.Struct, frozen=True):
    supports_tools: bool | None = None


class _Props(msgspec.Struct, frozen=True):
    chat_template_caps: _Caps | None = None


_PROPS_DECODER: Final = msgspec.json.Decoder(_Props)


class _Model(msgspec.Struct, frozen=True):
    id: str


class _Models(msgspec.Struct, frozen=True):
    data: list[_Model]


_MODELS_DECODER: Final = msgspec.json.Decoder(_Models)

T = TypeVar("T")


async def _probe(root: str, path: str, slug: str, decoder: msgspec.json.Decoder[T]) -> T | None:
    """``GET {root}{path}`` decoded, asked with no credential and answered within
    :data:`PROPS_TIMEOUT_MS`; None when it fails in any way: nothing is known."""
    try:
        return await request_json(
            probe_session(url=root),
            Endpoint(label=f"the server at {hide_userinfo(root)}", slug=slug),
            "GET",
            root + path,
            deadline=Deadline.after_ms(PROPS_TIMEOUT_MS),
            decoder=decoder,
        )
    except errors.LLMError:
        return None


async def served_models(root: str) -> list[str] | None:
    """The ids ``GET {root}/v1/models`` lists (llama.cpp, vLLM, Ollama and LM
    Studio all answer it, as the hosted APIs do with a credential), or None
    when it lists none without one."""
    listed = await _probe(root, "/v1/models", "models", _MODELS_DECODER)
    return None if listed is None else [model.id for model in listed.data]


async def no_tools_reason(root: str) -> str | None:
    """Why the server at ``root`` (its address, not its ``/v1``) would drop the
    tools (one line naming the fix), or None when its ``/props`` does not say
    its template renders none."""
    props = await _probe(root, "/props", "props", _PROPS_DECODER)
    caps = None if props is None else props.chat_template_caps
    if caps is None or caps.supports_tools is not False:
        return None
    return (
        f"the server at {hide_userinfo(root)} renders no tools with its chat template "
        "(its /props says supports_tools: false), so the model would answer without the tools "
        "it is offered; "
        f"{NO_TOOLS_FIX}"
    )
