"""Typed answers: a model's answer decoded into a type, or a typed error saying why not.

:func:`answer` sends ``T``'s JSON schema as the request's ``format`` (every
wire sends it as its own field; the stub records it), decodes the answer's
text into ``T`` and, when it does not fit, asks again with the error shown
to the model: at most ``retries`` times more, all of it inside the request's
``timeout_ms`` (one deadline for every attempt) and ``max_tokens`` (one
budget of output tokens for every attempt, each asked with what is left).
An answer cut by ``max_tokens`` is no whole JSON value, and asking again
with less budget left would be cut sooner: it is refused at once, said as
such. A refusal is refused too. Each refusal is
:class:`~vaelii_llm.errors.LLMBadAnswer`, holding every attempt's text and
error.

``T`` is a msgspec ``Struct``, a ``TypedDict``, a dataclass (or any type
msgspec takes: its schema and its decoding are msgspec's own), or a pydantic
model (its ``model_json_schema`` and ``model_validate_json``; pydantic is
never imported here). A schema whose top is a ``$ref`` into its ``$defs``
(msgspec's form for a Struct) goes out with that definition at the top,
since a wire's strictness and a server's grammar read the top object.

Streamed (:meth:`Answering.stream`), the answer yields each partial value as
its JSON arrives (jiter's partial mode: a string being written is shown so
far), then the whole validated ``T`` last; after a re-ask, the partial
values start again from the new answer's first bytes.

Where the issue left it open, as instructor and pydantic-ai do: the re-ask
is the failed answer as the assistant's turn and the validation error in a
user turn; a JSON answer wrapped in a Markdown code fence is read without
the fence.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator
from collections.abc import Callable
from collections.abc import Generator
from contextlib import aclosing
from typing import Any
from typing import Final
from typing import Generic
from typing import TypeVar

import jiter
import msgspec

from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Provider
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm.errors import LLMBadAnswer

__all__ = ["Answering", "answer"]

T = TypeVar("T")

REASK: Final = (
    "That answer does not match the JSON schema: {error}\n"
    "Answer again with one JSON value that matches the schema, and nothing else."
)
"""The user turn a re-ask adds after the answer that did not fit."""

_FENCE: Final = re.compile(r"^\s*```[A-Za-z]*\s*\n?(.*?)\s*(?:```\s*)?$", re.DOTALL)


class _Invalid(Exception):
    """The text is not a ``T``: the message says why, for the model to read."""


class _Type(Generic[T]):
    """``T``'s schema and its decoder, by what kind of type it is."""

    def __init__(self, into: type[T]) -> None:
        self.name = getattr(into, "__name__", repr(into))
        validate = getattr(into, "model_validate_json", None)
        schema_of = getattr(into, "model_json_schema", None)
        if callable(validate) and callable(schema_of):  # a pydantic model
            self.schema = _top(schema_of())
            self._decode: Callable[[str], T] = validate
            self._errors: tuple[type[Exception], ...] = (ValueError,)
            return
        try:
            self.schema = _top(msgspec.json.schema(into))
            decoder = msgspec.json.Decoder(into)
        except TypeError as exc:
            raise TypeError(
                "into takes a msgspec Struct, a TypedDict, a dataclass or a pydantic "
                f"model; got {into!r} ({exc})"
            ) from None
        self._decode = decoder.decode
        self._errors = (msgspec.ValidationError, msgspec.DecodeError)

    def decode(self, text: str) -> T:
        try:
            return self._decode(_unfenced(text))
        except self._errors as exc:
            raise _Invalid(str(exc)) from None


def _top(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with a top ``$ref`` into its ``$defs`` replaced by that definition."""
    ref = schema.get("$ref")
    defs = schema.get("$defs")
    if not isinstance(ref, str) or not isinstance(defs, dict) or len(schema) != 2:
        return schema
    name = ref.removeprefix("#/$defs/")
    held = defs.get(name)
    if not isinstance(held, dict):
        return schema
    rest = {k: v for k, v in defs.items() if k != name}
    still_used = f'"#/$defs/{name}"' in msgspec.json.encode(defs).decode()
    top = dict(held)
    if rest or still_used:
        top["$defs"] = defs if still_used else rest
    return top


def _unfenced(text: str) -> str:
    """The text without a Markdown code fence around it, when it has one."""
    if "```" not in text:
        return text
    found = _FENCE.match(text)
    return found.group(1) if found else text


def _text(response: Response) -> str:
    return "".join(b.text for b in response.content if isinstance(b, TextBlock))


class _Done(Generic[T]):
    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


class Answering(Generic[T]):
    """One typed answer being asked: ``await`` it for the ``T``, or iterate
    :meth:`stream` for partial values as they arrive and the ``T`` last."""

    def __init__(self, provider: Provider, request: Request, into: type[T], retries: int) -> None:
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries is a whole number of at least 0, got {retries!r}")
        self.provider = provider
        self.into = _Type(into)
        self.request = msgspec.structs.replace(request, format=self.into.schema)
        self.retries = retries

    def __await__(self) -> Generator[Any, None, T]:
        return self._whole().__await__()

    async def _whole(self) -> T:
        async with aclosing(self._attempts(deltas=False)) as steps:
            async for step in steps:
                if isinstance(step, _Done):
                    return step.value  # type: ignore[no-any-return]
        raise AssertionError("an answer ends with its value or raises")  # pragma: no cover

    async def stream(self) -> AsyncGenerator[Any, None]:
        """Each partial value (dicts, lists and scalars as the JSON so far
        reads) as it changes, then the validated ``T`` last. Iterate under
        ``contextlib.aclosing``: leaving early closes the turn at once."""
        async with aclosing(self._attempts(deltas=True)) as steps:
            async for step in steps:
                yield step.value if isinstance(step, _Done) else step

    async def _attempts(self, *, deltas: bool) -> AsyncGenerator[Any, None]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request.timeout_ms / 1000
        left_tokens = self.request.max_tokens
        messages = list(self.request.messages)
        tried: list[tuple[str, str]] = []
        for _ in range(self.retries + 1):
            left_ms = int((deadline - loop.time()) * 1000) if tried else self.request.timeout_ms
            if left_ms < 1 or left_tokens < 1:
                spent = "timeout_ms" if left_ms < 1 else "max_tokens"
                raise LLMBadAnswer(self.into.name, tried, f"its {spent} budget was spent")
            turn = msgspec.structs.replace(
                self.request, messages=messages, timeout_ms=left_ms, max_tokens=left_tokens
            )
            response: Response | None = None
            async with aclosing(_partials(self.provider, turn, deltas)) as items:
                async for item in items:
                    if isinstance(item, Response):
                        response = item
                    else:
                        yield item
            assert response is not None
            left_tokens -= response.usage.output_tokens or 0
            text = _text(response)
            if response.stop_reason in ("max_tokens", "refusal"):
                why = (
                    f"it was cut at max_tokens ({turn.max_tokens}) before it was whole; "
                    "raise max_tokens"
                    if response.stop_reason == "max_tokens"
                    else "the model refused"
                )
                tried.append((text, why))
                raise LLMBadAnswer(
                    self.into.name, tried, why, cut=response.stop_reason == "max_tokens"
                )
            try:
                value = self.into.decode(text)
            except _Invalid as exc:
                tried.append((text, str(exc)))
                messages = [
                    *messages,
                    Message(role="assistant", content=text),
                    Message(role="user", content=REASK.format(error=exc)),
                ]
                continue
            yield _Done(value)
            return
        raise LLMBadAnswer(self.into.name, tried, "no answer matched its schema")


async def _partials(
    provider: Provider, turn: Request, deltas: bool
) -> AsyncGenerator[Any | Response, None]:
    """One turn: each partial value as its text arrives, then the Response
    (without ``deltas``, the whole turn alone)."""
    if not deltas:
        yield await provider.complete(turn)
        return
    text = ""
    shown: Any = None
    async with aclosing(provider.stream(turn, deltas=True)) as items:
        async for item in items:
            if isinstance(item, TextDelta):
                text += item.text
                partial = _partial(text)
                if partial is not None and partial != shown:
                    shown = partial
                    yield partial
            elif isinstance(item, Response):
                yield item


def _partial(text: str) -> Any:
    """What ``text`` reads as so far (None when it reads as nothing yet)."""
    body = text.lstrip()
    if body.startswith("```"):
        body = body.partition("\n")[2]
    if not body:
        return None
    try:
        return jiter.from_json(body.encode(), partial_mode="trailing-strings")
    except ValueError:
        return None


def answer(
    provider: Provider, request: Request, *, into: type[T], retries: int = 1
) -> Answering[T]:
    """Ask ``request`` for an answer that is a ``T``: ``await`` it for the
    ``T``, or iterate its :meth:`~Answering.stream` for partial values then
    the ``T``. ``T``'s JSON schema goes as the request's ``format``; an
    answer that does not fit is asked again with the error shown, at most
    ``retries`` times, inside the request's ``timeout_ms`` and ``max_tokens``.
    A cut, a refusal or the last misfit raises
    :class:`~vaelii_llm.errors.LLMBadAnswer` with every attempt's text and error.
    """
    return Answering(provider, request, into, retries)
